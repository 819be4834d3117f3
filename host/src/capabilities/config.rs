//! `wasi:config`: the tenant's settings for its plugin, read-only. The
//! runner gives them no meaning; the plugin checks them when it is
//! admitted.

use crate::bindings::wasi::config::store as wit;
use crate::context::TenantContext;
use wasmtime::component::{HasData, Linker};

/// The view the generated `Host` trait is implemented for.
pub struct ConfigView<'a> {
    /// Whose settings the plugin reads.
    pub tenant: &'a TenantContext,
}

struct HasConfig;

impl HasData for HasConfig {
    type Data<'a> = ConfigView<'a>;
}

/// Adds `wasi:config/store` to the linker.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    view: fn(&mut T) -> ConfigView<'_>,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasConfig>(linker, view)
}

impl wit::Host for ConfigView<'_> {
    async fn get(&mut self, key: String) -> wasmtime::Result<Result<Option<String>, wit::Error>> {
        Ok(Ok(self.tenant.plugin_config.get(&key).cloned()))
    }

    async fn get_all(&mut self) -> wasmtime::Result<Result<Vec<(String, String)>, wit::Error>> {
        Ok(Ok(self
            .tenant
            .plugin_config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::OutboundPolicy;
    use wit::Host;

    #[tokio::test]
    async fn a_plugin_reads_its_tenants_settings_and_nothing_else() {
        let tenant = TenantContext::for_tests("t", OutboundPolicy::new(vec![]));
        let mut view = ConfigView { tenant: &tenant };
        assert_eq!(
            view.get("greeting".into()).await.unwrap().unwrap(),
            Some("hello".to_string())
        );
        assert_eq!(view.get("other".into()).await.unwrap().unwrap(), None);
        let all = view.get_all().await.unwrap().unwrap();
        assert_eq!(all, [("greeting".to_string(), "hello".to_string())]);
    }
}
