//! Black-box tests of portcullis-dialects against realistic provider bodies and streams
//! (the shapes of the providers' API references), named after rule ids.

mod props;
mod request;
mod support;
mod usage;
