//! clusterfw control plane.
#![deny(unsafe_code)]
