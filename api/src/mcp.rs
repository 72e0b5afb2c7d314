//! Pointing an AI assistant at GPUPlane over MCP: the endpoint and the
//! configuration snippets (the `mcpServers` form most assistants read) that
//! the console shows beside a new token and the README documents.

use serde_json::json;

/// The MCP endpoint on the server (streamable HTTP).
pub const PATH: &str = "/mcp";

/// A configuration that starts `gpuctl mcp` (MCP over stdio) for `server`.
pub fn stdio_config(server: &str, token: &str) -> String {
    pretty(json!({"mcpServers": {"gpuplane": {
        "command": "gpuctl",
        "args": ["mcp"],
        "env": {"GPUCTL_SERVER": server, "GPUCTL_TOKEN": token},
    }}}))
}

/// A configuration that speaks streamable HTTP to `server`'s `/mcp`.
pub fn http_config(server: &str, token: &str) -> String {
    pretty(json!({"mcpServers": {"gpuplane": {
        "type": "http",
        "url": format!("{}{PATH}", server.trim_end_matches('/')),
        "headers": {"Authorization": format!("Bearer {token}")},
    }}}))
}

fn pretty(value: serde_json::Value) -> String {
    serde_json::to_string_pretty(&value).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_name_the_server_and_the_token() {
        let http: serde_json::Value =
            serde_json::from_str(&http_config("https://gp.example/", "gpp_x")).unwrap();
        assert_eq!(http["mcpServers"]["gpuplane"]["url"], "https://gp.example/mcp");
        assert_eq!(
            http["mcpServers"]["gpuplane"]["headers"]["Authorization"],
            "Bearer gpp_x"
        );
        let stdio: serde_json::Value =
            serde_json::from_str(&stdio_config("https://gp.example", "gpp_x")).unwrap();
        assert_eq!(stdio["mcpServers"]["gpuplane"]["args"], json!(["mcp"]));
        assert_eq!(stdio["mcpServers"]["gpuplane"]["env"]["GPUCTL_TOKEN"], "gpp_x");
    }
}
