//! What the HTTP clients' tests share.

use serde_json::Value;
use wiremock::MockServer;

/// The JSON bodies the server received, in order.
pub async fn requests(server: &MockServer) -> Vec<Value> {
    server
        .received_requests()
        .await
        .expect("recording is on")
        .iter()
        .map(|r| serde_json::from_slice(&r.body).expect("JSON"))
        .collect()
}
