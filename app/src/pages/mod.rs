//! One module per console page.

mod admin;
mod alerts;
mod arrays;
mod dashboard;
pub(crate) mod device;
mod hub;
mod jobs;
mod login;
mod nodes;
mod not_found;
mod projects;
mod recipes;
mod run;
mod runs;
mod shares;
mod sweeps;
mod tokens;
mod usage;

pub use admin::{Admin, Audit};
pub use alerts::Alerts;
pub use dashboard::Dashboard;
pub use device::Device;
pub use hub::HuggingFace;
pub use jobs::{JobDetail, Jobs};
pub use login::Login;
pub use nodes::{Events, Nodes};
pub use not_found::NotFound;
pub use projects::Projects;
pub use recipes::Recipes;
pub use run::RunPage;
pub use runs::Runs;
pub use sweeps::{SweepPage, Sweeps};
pub use tokens::Tokens;
pub use usage::Usage;
