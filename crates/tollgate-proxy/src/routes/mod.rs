//! The gateway's routes: the model routes ([`api`]), the operational routes ([`ops`])
//! and the admin routes ([`admin`]). The stack they run on is assembled in
//! [`crate::app`]; the admin routes reach it through [`crate::running`].

pub(crate) mod admin;
pub(crate) mod api;
pub(crate) mod ops;
