//! One module per console page.

mod admin;
mod alerts;
mod dashboard;
pub(crate) mod device;
mod jobs;
mod login;
mod nodes;
mod not_found;
mod projects;
mod run;
mod runs;
mod shares;
mod tokens;

pub use admin::{Admin, Audit};
pub use alerts::Alerts;
pub use dashboard::Dashboard;
pub use device::Device;
pub use jobs::{JobDetail, Jobs};
pub use login::Login;
pub use nodes::{Events, Nodes};
pub use not_found::NotFound;
pub use projects::Projects;
pub use run::RunPage;
pub use runs::Runs;
pub use tokens::Tokens;
