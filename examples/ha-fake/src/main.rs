//! `ha-fake`: the fake Home Assistant on a port, for trying settle's Home
//! Assistant driver by hand.

use clap::Parser;
use std::time::Duration;

#[derive(Parser)]
#[command(about = "A fake Home Assistant REST API with two climate entities")]
struct Args {
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8123")]
    addr: std::net::SocketAddr,
    /// The long-lived access token clients must present.
    #[arg(long, env = "HA_TOKEN", default_value = "fake-ha-token")]
    token: String,
    /// How long a service call takes to show in the entity's state.
    #[arg(long, default_value_t = 3000)]
    delay_ms: u64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let fake = ha_fake::Fake::new(&args.token, Duration::from_millis(args.delay_ms));
    let listener = tokio::net::TcpListener::bind(args.addr).await?;
    eprintln!("fake Home Assistant at http://{}", listener.local_addr()?);
    axum::serve(listener, fake.router()).await?;
    Ok(())
}
