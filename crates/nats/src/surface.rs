//! What the command, the server and the Python package share to open a
//! store by URL: the JetStream options they take from the environment.

use convlog::{Error, Result};

use crate::JetStreamOptions;

/// The environment variable giving the replica count of a store the
/// command, the server or the Python package creates on JetStream (1 to 5;
/// default 3, [`JetStreamOptions::replicas`]). An existing store keeps the
/// count it was created with.
pub const REPLICAS_ENV: &str = "CONVLOG_NATS_REPLICAS";

/// The options the surfaces open a `nats://` store with: the defaults,
/// and the replica count from [`REPLICAS_ENV`] when it is set.
pub fn options_from_env() -> Result<JetStreamOptions> {
    let options = JetStreamOptions::new();
    match std::env::var(REPLICAS_ENV) {
        Ok(value) if !value.is_empty() => {
            let replicas = value.parse::<usize>().map_err(|_| Error::InvalidOption {
                option: REPLICAS_ENV,
                reason: format!("{value:?} is not a number of replicas (1 to 5)"),
            })?;
            Ok(options.replicas(replicas))
        }
        _ => Ok(options),
    }
}
