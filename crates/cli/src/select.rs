//! Which connections `tcptail top` and `tcptail record` read: a selector file and/or
//! `--port`/`--dport`/`--sport`/`--dst`, compiled into one kernel-side filter (only matching
//! sockets are serialised), established connections unless `--all-states`, in this or a named
//! network namespace.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tcptail_diag::filter::{Filter, Side};
use tcptail_diag::selector::{parse_port, parse_prefix};
use tcptail_diag::source::{SocketSource, SourceChoice};
use tcptail_diag::{DumpRequest, wire};

use crate::exporter::{load_selectors, open_source};

/// Connection-selection flags.
#[derive(Debug, Args)]
pub struct Selection {
    /// Selector file (TOML, as for `tcptail exporter`); connections matching any selector.
    #[arg(long)]
    pub selectors: Option<PathBuf>,
    /// Either end's port is PORT or in LO-HI (repeatable).
    #[arg(long)]
    pub port: Vec<String>,
    /// Remote port or LO-HI (repeatable).
    #[arg(long)]
    pub dport: Vec<String>,
    /// Local port or LO-HI (repeatable).
    #[arg(long)]
    pub sport: Vec<String>,
    /// Remote address or prefix, e.g. 10.0.0.0/8 (repeatable).
    #[arg(long)]
    pub dst: Vec<String>,
    /// Include every state, not only established connections.
    #[arg(long)]
    pub all_states: bool,
    /// Read the sockets of this network namespace (/run/netns/NAME).
    #[arg(long)]
    pub netns: Option<String>,
    /// Where sockets are read from: bpf (a BPF socket iterator: cheaper per socket; needs
    /// root and kernel BTF; port/address filters run inside its program), sock-diag, or auto
    /// (where BPF is available: bpf for whole-table dumps, sock-diag for filtered ones, whose
    /// kernel walk skips a rejected socket ~3x cheaper than the iterator visits one; else
    /// sock-diag, said in one line).
    #[arg(long, default_value_t = SourceChoice::Auto)]
    pub source: SourceChoice,
}

impl Selection {
    /// The kernel-side filter the flags describe (`None`: every connection).
    pub fn filter(&self) -> Result<Option<Filter>> {
        let mut all = Vec::new();
        let ports = |values: &[String], sides: &[Side], flag: &str| -> Result<Option<Filter>> {
            if values.is_empty() {
                return Ok(None);
            }
            let mut any = Vec::new();
            for v in values {
                for side in sides {
                    any.push(
                        parse_port(v, *side)
                            .with_context(|| format!("--{flag} {v:?}: want PORT or LO-HI"))?,
                    );
                }
            }
            Ok(Some(Filter::Or(any)))
        };
        all.extend(ports(&self.port, &[Side::Local, Side::Remote], "port")?);
        all.extend(ports(&self.dport, &[Side::Remote], "dport")?);
        all.extend(ports(&self.sport, &[Side::Local], "sport")?);
        if !self.dst.is_empty() {
            let any = self
                .dst
                .iter()
                .map(|v| {
                    parse_prefix(v)
                        .map(|prefix| Filter::Addr { side: Side::Remote, prefix })
                        .with_context(|| format!("--dst {v:?}: want ADDR or ADDR/LEN"))
                })
                .collect::<Result<Vec<_>>>()?;
            all.push(Filter::Or(any));
        }
        let selectors = load_selectors(self.selectors.as_ref(), None)?;
        all.extend(selectors.filter());
        Ok((!all.is_empty()).then_some(Filter::And(all)))
    }

    /// The dump request: the filter, the states, every attribute.
    pub fn request(&self) -> Result<DumpRequest> {
        Ok(DumpRequest {
            filter: self.filter()?,
            states: if self.all_states { wire::ALL_STATES } else { wire::ESTABLISHED },
            ..DumpRequest::default()
        })
    }

    /// The chosen dump source in the chosen namespace (`who` names the command in the line
    /// saying `auto` fell back to sock_diag).
    pub fn dumper(&self, who: &str) -> Result<SocketSource> {
        open_source(self.source, self.netns.as_deref(), who)
    }
}
