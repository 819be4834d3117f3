//! The live view's static files, embedded in the component and handed to
//! the runner's `/ui` (WIT `ui-asset`). The page itself (`guest/ui/`) is
//! an MCP client of the tenant's own endpoint: everything it shows comes
//! through the tools and resources every agent sees, so it cannot show a
//! device differently from how an agent would see it.

/// One embedded file: its `Content-Type` and bytes.
pub struct Asset {
    pub content_type: &'static str,
    pub body: &'static [u8],
}

/// Every file of the page, by its path under `/ui/`.
const ASSETS: [(&str, Asset); 3] = [
    (
        "index.html",
        Asset {
            content_type: "text/html; charset=utf-8",
            body: include_bytes!("../ui/index.html"),
        },
    ),
    (
        "app.js",
        Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../ui/app.js"),
        },
    ),
    (
        "style.css",
        Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../ui/style.css"),
        },
    ),
];

/// The file at `path` (`index.html` for the page itself), if the page has
/// one.
pub fn asset(path: &str) -> Option<&'static Asset> {
    ASSETS
        .iter()
        .find(|(name, _)| *name == path)
        .map(|(_, asset)| asset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_files_are_found_and_nothing_else() {
        let page = asset("index.html").expect("the page");
        assert!(page.content_type.starts_with("text/html"));
        let html = std::str::from_utf8(page.body).unwrap();
        // Every file the page links to is served.
        for linked in ["app.js", "style.css"] {
            assert!(html.contains(linked), "index.html links {linked}");
            assert!(asset(linked).is_some(), "{linked} is served");
        }
        for missing in ["", "/index.html", "../Cargo.toml", "app.js/", "APP.JS"] {
            assert!(asset(missing).is_none(), "{missing:?} is not a file");
        }
    }
}
