//! clusterfw configuration.
#![deny(unsafe_code)]
