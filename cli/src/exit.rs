//! Exit codes scripts can rely on (also listed in `gpuctl --help`).

use std::process::ExitCode;

/// What went wrong, by class; each maps to one exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// 1: anything else (a 5xx, an unreadable answer).
    Other = 1,
    /// 3: no token, or the server refused it (401).
    Unauthenticated = 3,
    /// 4: the token lacks the scope (403).
    Forbidden = 4,
    /// 5: no such job, run or node (404).
    NotFound = 5,
    /// 6: the request conflicts with the current state (409).
    Conflict = 6,
    /// 7: the input was refused (400, 422).
    Invalid = 7,
    /// 8: the server could not be reached.
    Unreachable = 8,
    /// 9: the experiment's recipe lock is behind the catalog (409 `recipe_drift`).
    Drift = 9,
}

impl Failure {
    pub fn from_status(status: u16) -> Failure {
        match status {
            401 => Failure::Unauthenticated,
            403 => Failure::Forbidden,
            404 => Failure::NotFound,
            409 => Failure::Conflict,
            400 | 413 | 422 => Failure::Invalid,
            _ => Failure::Other,
        }
    }

    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }
}

pub const HELP: &str = "\
Exit codes:
  0  success
  1  other error (server error, unexpected answer)
  2  usage error (bad flags or arguments)
  3  not signed in, or the token was refused (401)
  4  the token lacks the scope for this action (403)
  5  not found (404)
  6  conflict with the current state (409)
  7  invalid input (400, 422)
  8  the server could not be reached
  9  the experiment's recipe lock is behind the catalog (gpuctl recipe status DIR)";
