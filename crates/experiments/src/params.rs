//! A variant's parameters: the experiment file's `[params]`, overridden by the variant's own
//! keys, overridden by the mode's (`[mode.quick]`). Each value remembers the line it came
//! from, and every key a workload reads is marked, so a key no workload reads is reported as
//! unknown at its line instead of being silently ignored.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tcptail_units::{BitRate, ByteSize, Percent, parse_duration};

/// One parameter value and where it was set.
#[derive(Debug, Clone, PartialEq)]
pub struct Param {
    /// The value as written.
    pub value: toml::Value,
    /// 1-based line in the experiment file (0 when built in code).
    pub line: usize,
}

/// A workload's parameters for one variant in one mode.
#[derive(Debug, Default)]
pub struct Params {
    values: BTreeMap<String, Param>,
    read: RefCell<BTreeSet<String>>,
}

/// A parameter that is missing, of the wrong type, or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {problem}")]
pub struct ParamError {
    /// The key at fault.
    pub key: String,
    /// What is wrong, in words.
    pub problem: String,
}

impl ParamError {
    /// An error about `key`.
    pub fn new(key: &str, problem: impl Into<String>) -> ParamError {
        ParamError { key: key.to_owned(), problem: problem.into() }
    }
}

impl Clone for Params {
    fn clone(&self) -> Params {
        Params { values: self.values.clone(), read: RefCell::new(self.read.borrow().clone()) }
    }
}

impl Params {
    /// Parameters from `(key, value, line)` triples; later ones override earlier ones.
    pub fn from_layers<'a>(
        layers: impl IntoIterator<Item = &'a BTreeMap<String, Param>>,
    ) -> Params {
        let mut values = BTreeMap::new();
        for layer in layers {
            for (k, v) in layer {
                values.insert(k.clone(), v.clone());
            }
        }
        Params { values, read: RefCell::default() }
    }

    /// Parameters set in code (tests, built-in defaults): every line is 0.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, toml::Value)>) -> Params {
        let values =
            pairs.into_iter().map(|(k, value)| (k.to_owned(), Param { value, line: 0 })).collect();
        Params { values, read: RefCell::default() }
    }

    /// The line a key was set on, if it was set.
    pub fn line(&self, key: &str) -> Option<usize> {
        self.values.get(key).map(|p| p.line)
    }

    /// Keys that were set but never read: unknown to the workload.
    pub fn unread(&self) -> Vec<String> {
        let read = self.read.borrow();
        self.values.keys().filter(|k| !read.contains(*k)).cloned().collect()
    }

    /// Every value as JSON, for `results.json`'s `config`.
    pub fn to_json(&self) -> BTreeMap<String, serde_json::Value> {
        self.values
            .iter()
            .map(|(k, p)| (k.clone(), serde_json::to_value(&p.value).unwrap_or_default()))
            .collect()
    }

    /// The raw value of `key`, marking it read.
    pub fn raw(&self, key: &str) -> Option<&toml::Value> {
        self.read.borrow_mut().insert(key.to_owned());
        self.values.get(key).map(|p| &p.value)
    }

    /// Whether `key` is set (marks it read).
    pub fn has(&self, key: &str) -> bool {
        self.raw(key).is_some()
    }

    /// A value written as a string (or a number, for parsers that accept plain numbers) and
    /// parsed by `parse`; the parser's message becomes the error.
    pub fn parsed<T>(
        &self,
        key: &str,
        parse: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<Option<T>, ParamError> {
        let text = match self.raw(key) {
            None => return Ok(None),
            Some(toml::Value::String(s)) => s.clone(),
            Some(toml::Value::Integer(i)) => i.to_string(),
            Some(toml::Value::Float(f)) => f.to_string(),
            Some(other) => {
                return Err(ParamError::new(
                    key,
                    format!("expected a string, found {}", other.type_str()),
                ));
            }
        };
        parse(&text).map(Some).map_err(|problem| ParamError::new(key, problem))
    }

    /// A string.
    pub fn str(&self, key: &str) -> Result<Option<String>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => {
                Err(ParamError::new(key, format!("expected a string, found {}", other.type_str())))
            }
        }
    }

    /// One of `choices`.
    pub fn choice(&self, key: &str, choices: &[&str]) -> Result<Option<String>, ParamError> {
        match self.str(key)? {
            None => Ok(None),
            Some(s) if choices.contains(&s.as_str()) => Ok(Some(s)),
            Some(s) => {
                Err(ParamError::new(key, format!("`{s}` is not one of {}", choices.join(", "))))
            }
        }
    }

    /// A boolean.
    pub fn bool(&self, key: &str) -> Result<Option<bool>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::Boolean(b)) => Ok(Some(*b)),
            Some(other) => Err(ParamError::new(
                key,
                format!("expected true or false, found {}", other.type_str()),
            )),
        }
    }

    /// A non-negative integer no larger than `max`.
    pub fn uint(&self, key: &str, max: u64) -> Result<Option<u64>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::Integer(i)) => match u64::try_from(*i) {
                Ok(v) if v <= max => Ok(Some(v)),
                _ => Err(ParamError::new(key, format!("{i} is outside 0..={max}"))),
            },
            Some(other) => Err(ParamError::new(
                key,
                format!("expected an integer, found {}", other.type_str()),
            )),
        }
    }

    /// A duration (`10ms`, `2s`, `500us`).
    pub fn duration(&self, key: &str) -> Result<Option<Duration>, ParamError> {
        self.parsed(key, |s| parse_duration(s).map_err(|e| e.to_string()))
    }

    /// A bit rate (`30mbit`, `1gbit`).
    pub fn rate(&self, key: &str) -> Result<Option<BitRate>, ParamError> {
        self.parsed(key, |s| s.parse::<BitRate>().map_err(|e| e.to_string()))
    }

    /// A byte size (`64B`, `256KB`, `8MB`).
    pub fn bytes(&self, key: &str) -> Result<Option<u64>, ParamError> {
        self.parsed(key, |s| s.parse::<ByteSize>().map(|b| b.bytes()).map_err(|e| e.to_string()))
    }

    /// A percentage (`1%`, `0.1%`) as a fraction of one.
    pub fn percent(&self, key: &str) -> Result<Option<f64>, ParamError> {
        self.parsed(key, |s| s.parse::<Percent>().map(|p| p.fraction()).map_err(|e| e.to_string()))
    }

    /// A list of strings.
    pub fn strings(&self, key: &str) -> Result<Option<Vec<String>>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::Array(items)) => items
                .iter()
                .map(|v| match v {
                    toml::Value::String(s) => Ok(s.clone()),
                    other => Err(ParamError::new(
                        key,
                        format!("expected strings, found {}", other.type_str()),
                    )),
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(other) => Err(ParamError::new(
                key,
                format!("expected a list of strings, found {}", other.type_str()),
            )),
        }
    }

    /// A table of string values (`sysctl = { "net.ipv4.tcp_slow_start_after_idle" = "0" }`);
    /// numbers are accepted and written as text.
    pub fn string_table(&self, key: &str) -> Result<Option<BTreeMap<String, String>>, ParamError> {
        match self.raw(key) {
            None => Ok(None),
            Some(toml::Value::Table(t)) => t
                .iter()
                .map(|(k, v)| match v {
                    toml::Value::String(s) => Ok((k.clone(), s.clone())),
                    toml::Value::Integer(i) => Ok((k.clone(), i.to_string())),
                    other => Err(ParamError::new(
                        key,
                        format!("`{k}`: expected a string, found {}", other.type_str()),
                    )),
                })
                .collect::<Result<BTreeMap<_, _>, _>>()
                .map(Some),
            Some(other) => {
                Err(ParamError::new(key, format!("expected a table, found {}", other.type_str())))
            }
        }
    }
}

/// `Some(v)` or a "missing" error naming the key.
pub fn required<T>(key: &str, value: Option<T>) -> Result<T, ParamError> {
    value.ok_or_else(|| ParamError::new(key, "is required"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        Params::from_pairs(pairs.iter().map(|(k, v)| (*k, v.clone())))
    }

    #[test]
    fn typed_reads_mark_keys_and_name_the_key_on_error() {
        let p = params(&[
            ("rate", "30mbit".into()),
            ("rtt", "10ms".into()),
            ("flows", 8.into()),
            ("cc", "vegas".into()),
            ("typo", true.into()),
        ]);
        assert_eq!(p.rate("rate").unwrap().unwrap().0, 30_000_000);
        assert_eq!(p.duration("rtt").unwrap(), Some(Duration::from_millis(10)));
        assert_eq!(p.uint("flows", 64).unwrap(), Some(8));
        let err = p.choice("cc", &["cubic", "bbr", "reno"]).unwrap_err();
        assert_eq!(err.key, "cc");
        assert!(err.problem.contains("vegas"), "{err}");
        assert_eq!(p.unread(), vec!["typo".to_owned()]);
        assert!(p.uint("flows", 4).is_err());
    }

    #[test]
    fn later_layers_override_earlier_ones() {
        let base: BTreeMap<String, Param> =
            [("rtt".to_owned(), Param { value: "10ms".into(), line: 3 })].into();
        let mode: BTreeMap<String, Param> =
            [("rtt".to_owned(), Param { value: "50ms".into(), line: 9 })].into();
        let p = Params::from_layers([&base, &mode]);
        assert_eq!(p.duration("rtt").unwrap(), Some(Duration::from_millis(50)));
        assert_eq!(p.line("rtt"), Some(9));
    }

    #[test]
    fn wrong_types_are_named() {
        let p = params(&[("sysctl", 3.into()), ("on", "yes".into())]);
        assert!(p.string_table("sysctl").unwrap_err().problem.contains("expected a table"));
        assert!(p.bool("on").unwrap_err().problem.contains("true or false"));
    }
}
