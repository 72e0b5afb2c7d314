//! The view lives in the URL query, so a copied link opens the same view.

use crate::encode;
use leptos_router::params::ParamsMap;

/// `path` with the current query and `changes` applied (`None` removes a key;
/// empty values are dropped).
pub fn link(path: &str, query: &ParamsMap, changes: &[(&str, Option<&str>)]) -> String {
    let mut pairs: Vec<(String, String)> = query
        .into_iter()
        .filter(|(key, _)| !changes.iter().any(|(changed, _)| changed == key))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    for (key, value) in changes {
        if let Some(value) = value {
            pairs.push((key.to_string(), value.to_string()));
        }
    }
    let query: Vec<String> = pairs
        .into_iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| format!("{}={}", encode(&key), encode(&value)))
        .collect();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// An API path with query parameters (empty values left out).
pub fn api(path: &str, params: &[(&str, &str)]) -> String {
    let query: Vec<String> = params
        .iter()
        .filter(|(_, value)| !value.is_empty())
        .map(|(key, value)| format!("{key}={}", encode(value)))
        .collect();
    if query.is_empty() {
        path.to_string()
    } else {
        format!("{path}?{}", query.join("&"))
    }
}

/// The value of `key` in a raw query string (`?a=1&b=2`), decoded once.
/// `use_query_map` decodes values twice (leptos_router 0.8 percent-decodes
/// what the URL parser already decoded), so a `next` holding `%20` would
/// come back with a space; read such values here.
pub fn raw_param(search: &str, key: &str) -> Option<String> {
    form_urlencoded::parse(search.trim_start_matches('?').as_bytes())
        .find(|(name, _)| name == key)
        .map(|(_, value)| value.into_owned())
}
