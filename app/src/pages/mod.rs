//! One module per console page.

mod dashboard;
mod not_found;

pub use dashboard::Dashboard;
pub use not_found::NotFound;
