//! The integration tests: one binary (ripgrep's shape), a module per
//! area, so an edit relinks one test binary, not twenty. The support
//! modules come first: `common` runs the real binaries against eniip-sim
//! (and holds what every area polls and skips with); `cnienv`
//! builds the network namespaces eniip-cni's tests run in;
//! `listener_harness` is the socket server in-process; `openapi_client` is
//! eniipd's OpenAPI client for
//! the tests' own calls; `man` reads the man pages; `cri`, `podman` and
//! `shipped` drive the runtimes and the shipped files; `kube` plays a
//! Kubernetes node with the shipped image and manifest.

mod cnienv;
mod common;
mod cri;
mod kube;
mod listener_harness;
mod man;
mod openapi_client;
mod podman;
mod shipped;

mod alloc_prefix_frag;
mod alloc_prefix_sim;
mod alloc_sim;
mod alloc_v6prefix_sim;
mod chaos;
mod cloud_prefix_sim;
mod cloud_sim;
mod cni_away;
mod cni_containerd;
mod cni_containerd_sg;
mod cni_demo;
mod cni_docs;
mod cni_errors;
mod cni_hostile;
mod cni_local;
mod cni_netns;
mod cni_podman;
mod cni_reap;
mod cni_reap_evidence;
mod cni_versions;
mod command_lines;
mod config_check;
mod config_prefix;
mod daemon;
mod daemon_conflist;
mod daemon_keep_gc;
mod daemon_peer;
mod daemon_queue;
mod daemon_restart;
mod daemon_simulate;
mod daemon_start;
mod docs;
mod exhaustion_forecast;
mod footprint;
mod frozen_disk;
mod hygiene;
mod k8s_daemonset;
mod layering;
mod node_drain;
mod readme_socat;
mod server;
mod sg_sets_sim;
mod sim_actions;
mod sim_fleet;
mod sim_node_sdk;
mod sim_prefixes;
mod sim_protocol;
mod sim_python_sdk;
mod sim_security_groups;
mod sim_state_file;
mod sim_v3;
mod store_corruption;
mod store_crash;
mod storm;
mod undo_names;
mod undo_names_race;
mod vswitch_unknown;
