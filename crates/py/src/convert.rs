//! Values between Rust and Python: serde data to `dict`/`list`, Python durations and sizes to
//! the units of `tcptail-units`.

use std::time::Duration;

use pyo3::IntoPyObjectExt;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};
use serde_json::Value;
use tcptail_units::ByteSize;

/// Any serialisable value as plain Python objects (dict, list, str, int, float, bool, None).
pub(crate) fn to_py<'py>(
    py: Python<'py>,
    value: &impl serde::Serialize,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_value(value)
        .map_err(|e| PyValueError::new_err(format!("cannot convert to Python: {e}")))?;
    json_to_py(py, &json)
}

fn json_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                u.into_bound_py_any(py)?
            } else if let Some(i) = n.as_i64() {
                i.into_bound_py_any(py)?
            } else {
                n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?
            }
        }
        Value::String(s) => s.into_bound_py_any(py)?,
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (k, item) in map {
                dict.set_item(k, json_to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A duration from Python: seconds (`int`/`float`), a `datetime.timedelta`, or text with a unit
/// (`"10ms"`). `what` names the option in errors.
pub(crate) fn duration(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("`{what}`: expected a duration, got a bool")));
    }
    if let Ok(s) = v.cast::<PyString>() {
        let text = s.to_str()?;
        return tcptail_units::parse_duration(text)
            .map_err(|e| PyValueError::new_err(format!("`{what}`: {e}")));
    }
    if v.is_instance_of::<PyInt>() || v.is_instance_of::<PyFloat>() {
        let secs: f64 = v.extract()?;
        return Duration::try_from_secs_f64(secs).map_err(|_| {
            PyValueError::new_err(format!(
                "`{what}`: {secs} is not a duration in seconds (0 or more, finite)"
            ))
        });
    }
    v.extract::<Duration>().map_err(|_| {
        PyTypeError::new_err(format!(
            "`{what}`: expected seconds, a datetime.timedelta or text like \"10ms\", got {}",
            type_name(v)
        ))
    })
}

/// A byte count from Python: a non-negative `int` or text with a unit (`"4MiB"`).
pub(crate) fn byte_size(what: &str, v: &Bound<'_, PyAny>) -> PyResult<ByteSize> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!("`{what}`: expected a size, got a bool")));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return s
            .to_str()?
            .parse::<ByteSize>()
            .map_err(|e| PyValueError::new_err(format!("`{what}`: {e}")));
    }
    if v.is_instance_of::<PyInt>() {
        return v.extract::<u64>().map(ByteSize).map_err(|_| {
            PyValueError::new_err(format!("`{what}`: {v} is not a size in bytes (0 or more)"))
        });
    }
    Err(PyTypeError::new_err(format!(
        "`{what}`: expected a size in bytes or text like \"64KiB\", got {}",
        type_name(v)
    )))
}

/// A strict `bool` (not any truthy value): `nodelay=1` is almost always a mistake for another
/// option.
pub(crate) fn boolean(what: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if v.is_instance_of::<PyBool>() {
        return v.extract();
    }
    Err(PyTypeError::new_err(format!("`{what}`: expected True or False, got {}", type_name(v))))
}

pub(crate) fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}
