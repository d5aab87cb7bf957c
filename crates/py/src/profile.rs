//! `tcptail.Profile`: a [`tcptail_sock::Profile`] loaded by name or path, with keyword overrides
//! mapped onto its fields. Loading and validation are the Rust crate's; this module only maps
//! Python values onto fields and errors onto exceptions naming the option.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use tcptail_sock::{BufferSize, Keepalive, Profile, QuickAck};
use tcptail_units::Bdp;

use crate::ProfileError;
use crate::convert::{boolean, byte_size, duration, to_py, type_name};

/// The keyword overrides `connect`, `apply` and `Profile.with_overrides` accept.
const OVERRIDES: &[&str] = &[
    "name",
    "congestion",
    "nodelay",
    "quickack",
    "bdp",
    "send_buffer",
    "receive_buffer",
    "keepalive",
    "user_timeout",
    "reuse_address",
    "reuse_port",
    "busy_poll",
    "notsent_lowat",
    "priority",
];

/// A socket profile: congestion control, NODELAY, QUICKACK policy, buffers, keepalive, ...
///
/// Load one with `Profile.load("trading")` (a built-in name or a TOML file path); derive one
/// with `profile.with_overrides(congestion="bbr", nodelay=True)`.
#[pyclass(module = "tcptail._native", name = "Profile", frozen)]
#[derive(Debug, Clone)]
pub(crate) struct PyProfile {
    pub(crate) inner: Profile,
}

#[pymethods]
impl PyProfile {
    /// A built-in profile (`trading`, `throughput`, `kernel-default`) or a TOML file.
    #[staticmethod]
    fn load(name_or_path: &str) -> PyResult<PyProfile> {
        Profile::load(name_or_path)
            .map(|inner| PyProfile { inner })
            .map_err(|e| ProfileError::new_err(e.to_string()))
    }

    /// The built-in profile names.
    #[staticmethod]
    fn builtin_names() -> Vec<&'static str> {
        Profile::builtin_names().to_vec()
    }

    /// A copy with the given fields replaced (`None` unsets a field).
    #[pyo3(signature = (**overrides))]
    fn with_overrides(&self, overrides: Option<&Bound<'_, PyDict>>) -> PyResult<PyProfile> {
        let mut inner = self.inner.clone();
        if let Some(overrides) = overrides {
            apply_overrides(&mut inner, overrides)?;
        }
        Ok(PyProfile { inner })
    }

    /// The profile's name.
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }

    /// The QUICKACK policy: `"off"`, `"once"` or `"rearm"`.
    #[getter]
    fn quickack(&self) -> String {
        self.inner.quickack.to_string()
    }

    /// The profile as a dict, in the profile file's spelling (unset fields left out).
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner)
    }

    /// Advice about valid settings that may not do what the author expects: `(key, message)`.
    fn advisories(&self) -> Vec<(&'static str, &'static str)> {
        self.inner.advisories().into_iter().map(|a| (a.key, a.message)).collect()
    }

    fn __repr__(&self) -> String {
        let fields = serde_json::to_string(&self.inner).unwrap_or_default();
        format!("Profile({fields})")
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other.cast::<PyProfile>().is_ok_and(|o| o.get().inner == self.inner)
    }
}

/// A `Profile` from what Python passed: a `Profile` object or a name/path to load.
pub(crate) fn resolve(profile: &Bound<'_, PyAny>) -> PyResult<Profile> {
    if let Ok(p) = profile.cast::<PyProfile>() {
        return Ok(p.get().inner.clone());
    }
    if let Ok(s) = profile.cast::<PyString>() {
        return PyProfile::load(s.to_str()?).map(|p| p.inner);
    }
    Err(PyTypeError::new_err(format!(
        "profile must be a name, a path or a tcptail.Profile, got {}",
        type_name(profile)
    )))
}

/// Sets each override on `profile`, then validates it; errors name the option at fault.
pub(crate) fn apply_overrides(
    profile: &mut Profile,
    overrides: &Bound<'_, PyDict>,
) -> PyResult<()> {
    for (key, value) in overrides.iter() {
        let key: String = key.extract()?;
        set_field(profile, &key, &value)?;
    }
    profile.validate().map_err(|e| PyValueError::new_err(e.to_string()))
}

fn set_field(p: &mut Profile, key: &str, v: &Bound<'_, PyAny>) -> PyResult<()> {
    let none = v.is_none();
    match key {
        "name" => p.name = v.extract().map_err(|_| type_err(key, "a string", v))?,
        "congestion" => {
            p.congestion = if none {
                None
            } else {
                Some(v.extract().map_err(|_| type_err(key, "a name such as \"cubic\"", v))?)
            }
        }
        "nodelay" => p.nodelay = opt(v, |v| boolean(key, v))?,
        "reuse_address" => p.reuse_address = opt(v, |v| boolean(key, v))?,
        "reuse_port" => p.reuse_port = opt(v, |v| boolean(key, v))?,
        "quickack" => p.quickack = quickack(v)?,
        "bdp" => {
            let bdp = opt(v, |v| bdp(key, v))?;
            p.send_buffer = bdp.map(BufferSize::Bdp);
            p.receive_buffer = bdp.map(BufferSize::Bdp);
        }
        "send_buffer" => p.send_buffer = opt(v, |v| buffer(key, v))?,
        "receive_buffer" => p.receive_buffer = opt(v, |v| buffer(key, v))?,
        "keepalive" => p.keepalive = opt(v, keepalive)?,
        "user_timeout" => p.user_timeout = opt(v, |v| duration(key, v))?,
        "busy_poll" => p.busy_poll = opt(v, |v| duration(key, v))?,
        "notsent_lowat" => p.notsent_lowat = opt(v, |v| byte_size(key, v))?,
        "priority" => {
            p.priority = opt(v, |v| {
                v.extract::<u32>()
                    .map_err(|_| PyValueError::new_err(format!("`priority`: {v} is not 0..2^32")))
            })?
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "unknown profile override `{other}`; valid: {}",
                OVERRIDES.join(", ")
            )));
        }
    }
    Ok(())
}

fn opt<T>(
    v: &Bound<'_, PyAny>,
    f: impl FnOnce(&Bound<'_, PyAny>) -> PyResult<T>,
) -> PyResult<Option<T>> {
    if v.is_none() { Ok(None) } else { f(v).map(Some) }
}

fn type_err(key: &str, expected: &str, v: &Bound<'_, PyAny>) -> PyErr {
    PyTypeError::new_err(format!("`{key}`: expected {expected}, got {}", type_name(v)))
}

fn quickack(v: &Bound<'_, PyAny>) -> PyResult<QuickAck> {
    if v.is_none() {
        return Ok(QuickAck::Off);
    }
    let s: String =
        v.extract().map_err(|_| type_err("quickack", "\"off\", \"once\" or \"rearm\"", v))?;
    s.parse().map_err(|e: String| PyValueError::new_err(format!("`quickack`: {e}")))
}

fn bdp(key: &str, v: &Bound<'_, PyAny>) -> PyResult<Bdp> {
    let s: String = v.extract().map_err(|_| type_err(key, "text like \"10gbit x 1ms\"", v))?;
    s.parse().map_err(|e| PyValueError::new_err(format!("`{key}`: {e}")))
}

/// A buffer: bytes (`int` or `"4MiB"`) or a bandwidth-delay product (`"10gbit x 1ms"`).
fn buffer(key: &str, v: &Bound<'_, PyAny>) -> PyResult<BufferSize> {
    if let Ok(s) = v.cast::<PyString>() {
        let text = s.to_str()?;
        if text.contains(['x', 'X', '*', '×']) {
            return bdp(key, v).map(BufferSize::Bdp);
        }
    }
    byte_size(key, v).map(BufferSize::Bytes)
}

/// `(idle, interval, count)` or `{"idle": .., "interval": .., "count": ..}`.
fn keepalive(v: &Bound<'_, PyAny>) -> PyResult<Keepalive> {
    let (idle, interval, count) = if let Ok(d) = v.cast::<PyDict>() {
        let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
            d.get_item(k)?.ok_or_else(|| {
                PyValueError::new_err(format!(
                    "`keepalive.{k}` is missing (give idle, interval and count)"
                ))
            })
        };
        if let Some(extra) = d.keys().iter().find_map(|k| {
            let k: String = k.extract().unwrap_or_default();
            (!["idle", "interval", "count"].contains(&k.as_str())).then_some(k)
        }) {
            return Err(PyTypeError::new_err(format!(
                "unknown key `keepalive.{extra}`; valid: idle, interval, count"
            )));
        }
        (get("idle")?, get("interval")?, get("count")?)
    } else if let Ok(t) = v.cast::<PyTuple>()
        && t.len() == 3
    {
        (t.get_item(0)?, t.get_item(1)?, t.get_item(2)?)
    } else {
        return Err(type_err("keepalive", "(idle, interval, count) or a dict of them", v));
    };
    Ok(Keepalive {
        idle: duration("keepalive.idle", &idle)?,
        interval: duration("keepalive.interval", &interval)?,
        count: count.extract().map_err(|_| {
            PyValueError::new_err(format!("`keepalive.count`: {count} is not a count"))
        })?,
    })
}
