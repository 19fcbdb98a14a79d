//! The real MCP server of the tests (`tests/mcp/server.py`, on the MCP
//! Python SDK), shared by the agent's MCP tests and the CLI's chat tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The Python that runs the server (`CONVLOG_PYTHON`, default `python3`).
pub fn python() -> String {
    std::env::var("CONVLOG_PYTHON").unwrap_or_else(|_| "python3".to_owned())
}

/// The server script.
pub fn server_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("agent/tests/mcp/server.py")
}

/// Whether the MCP Python SDK is there; if not, says so (and fails when
/// `CONVLOG_REQUIRE_MCP=1`).
pub fn available(test: &str) -> bool {
    // Probed once: importing the SDK takes seconds.
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let probe =
        PROBE.get_or_init(
            || match Command::new(python()).args(["-c", "import mcp"]).output() {
                Ok(output) if output.status.success() => Ok(()),
                Ok(output) => Err(format!(
                    "`{} -c 'import mcp'` failed: {}",
                    python(),
                    String::from_utf8_lossy(&output.stderr).trim()
                )),
                Err(error) => Err(format!("cannot run `{}`: {error}", python())),
            },
        );
    let Err(why) = probe else {
        return true;
    };
    if std::env::var("CONVLOG_REQUIRE_MCP").as_deref() == Ok("1") {
        panic!("{test}: the MCP Python SDK is required (CONVLOG_REQUIRE_MCP=1) but {why}");
    }
    eprintln!("{test}: SKIPPED, the MCP Python SDK is missing ({why}); `pip install 'mcp==2.3.0'`");
    false
}
