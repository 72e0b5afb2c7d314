//! Who is asking and what they may do: tokens and passwords, the `Authed`
//! extractor, the console sessions' store, project access rules, rate
//! limits, and the server's secret key. The sign-in flows (console
//! sessions, SSO, device-code login) are HTTP and live in `api/`.

pub mod access;
pub mod auth;
pub mod credentials;
pub mod device_codes;
pub mod hub_tokens;
pub mod ratelimit;
pub mod secrets;
pub mod session_store;
pub mod streams;
pub mod tokens;
pub mod users;
