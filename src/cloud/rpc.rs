//! Placeholder: filled in by the cloud-layer work.
