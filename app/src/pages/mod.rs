//! One module per console page.

mod dashboard;
mod device;
mod login;
mod not_found;
mod tokens;

pub use dashboard::Dashboard;
pub use device::Device;
pub use login::Login;
pub use not_found::NotFound;
pub use tokens::Tokens;
