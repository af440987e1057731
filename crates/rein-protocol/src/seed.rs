//! Shapes shared with the OpenClaw.NET seed (seed 000) where its wire form and
//! rein's differ: a list entry that is text in rein and an object in the seed
//! ([`TextOr`]), a confidence that is a score in rein and a level in the seed
//! ([`Confidence`]), and a record's `metadata` object ([`RecordMetadata`]).
//! Both forms are accepted and each is returned as it came, so a client of
//! either loses nothing.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{self, DeserializeOwned, Deserializer};
use serde::{Deserialize, Serialize};

/// An entry given as text (rein's form) or as the seed's object (or list).
/// Anything but text is read as `T`, so a field `T` does not know is refused
/// naming it, never dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "TextOr{T}")]
pub enum TextOr<T> {
    Text(String),
    Object(T),
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for TextOr<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => Ok(TextOr::Text(s)),
            v @ (serde_json::Value::Object(_) | serde_json::Value::Array(_)) => T::deserialize(v)
                .map(TextOr::Object)
                .map_err(de::Error::custom),
            other => Err(de::Error::custom(format_args!(
                "expected text or an object, not {}",
                kind_of(&other)
            ))),
        }
    }
}

/// Makes each type's serde derive (written with `#[serde(remote = "Self")]`)
/// take only a JSON object: serde's derive also reads a struct from a list of
/// its fields in order, so `"metadata": [null, null]` would be taken as an
/// empty object, and a resource given as a list would lose its meaning.
#[macro_export]
macro_rules! objects_only {
    ($($t:ty),* $(,)?) => {$(
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                <$t>::serialize(self, s)
            }
        }
        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                $crate::seed::object_only(d, |v| <$t>::deserialize(v))
            }
        }
    )*};
}

/// Reads an object with `read`, refusing anything else.
#[doc(hidden)]
pub fn object_only<'de, D, T>(
    d: D,
    read: impl FnOnce(serde_json::Value) -> Result<T, serde_json::Error>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let v = serde_json::Value::deserialize(d)?;
    if !v.is_object() {
        return Err(de::Error::custom(format_args!(
            "expected an object, not {}",
            kind_of(&v)
        )));
    }
    read(v).map_err(de::Error::custom)
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "text",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

/// What an entry says, for a person: its text, or the object's own summary.
pub trait Said {
    fn said(&self) -> String;
}

impl<T: Said> TextOr<T> {
    pub fn said(&self) -> String {
        match self {
            TextOr::Text(s) => s.clone(),
            TextOr::Object(o) => o.said(),
        }
    }
}

impl<T: Said> fmt::Display for TextOr<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.said())
    }
}

impl<T: Said> Said for Vec<T> {
    fn said(&self) -> String {
        self.iter().map(Said::said).collect::<Vec<_>>().join("; ")
    }
}

/// Text entries compare with text; an object never equals text.
impl<T> PartialEq<&str> for TextOr<T> {
    fn eq(&self, other: &&str) -> bool {
        matches!(self, TextOr::Text(t) if t == other)
    }
}

impl<T> From<String> for TextOr<T> {
    fn from(s: String) -> Self {
        TextOr::Text(s)
    }
}

impl<T> From<&str> for TextOr<T> {
    fn from(s: &str) -> Self {
        TextOr::Text(s.to_owned())
    }
}

/// The first of `parts` that is given and not empty, else `fallback`.
pub(crate) fn first_said(parts: &[Option<&str>], fallback: &str) -> String {
    parts
        .iter()
        .flatten()
        .find(|s| !s.trim().is_empty())
        .copied()
        .unwrap_or(fallback)
        .to_owned()
}

/// The seed's confidence levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConfidenceLevel {
    #[default]
    Unknown,
    Low,
    Medium,
    High,
}

impl ConfidenceLevel {
    pub fn as_str(self) -> &'static str {
        match self {
            ConfidenceLevel::Unknown => "unknown",
            ConfidenceLevel::Low => "low",
            ConfidenceLevel::Medium => "medium",
            ConfidenceLevel::High => "high",
        }
    }
}

/// How sure the evidence is: a score from 0 to 1 (rein's form, what rein's
/// own verification computes) or a level (the seed's: unknown, low, medium,
/// high). Each is returned as given.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Confidence {
    Score(f64),
    Level(ConfidenceLevel),
}

impl<'de> Deserialize<'de> for Confidence {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n
                .as_f64()
                .map(Confidence::Score)
                .ok_or_else(|| de::Error::custom("`confidence` must be a number from 0 to 1")),
            v @ serde_json::Value::String(_) => ConfidenceLevel::deserialize(v)
                .map(Confidence::Level)
                .map_err(|_| {
                    de::Error::custom(
                        "`confidence` must be a number from 0 to 1 or one of unknown, low, medium, high",
                    )
                }),
            other => Err(de::Error::custom(format_args!(
                "`confidence` must be a number from 0 to 1 or one of unknown, low, medium, high, not {}",
                kind_of(&other)
            ))),
        }
    }
}

impl fmt::Display for Confidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Confidence::Score(s) => write!(f, "{s:.2}"),
            Confidence::Level(l) => f.write_str(l.as_str()),
        }
    }
}

/// The seed's `metadata` object on a contract or an evidence bundle.
#[serde_with::skip_serializing_none]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, remote = "Self")]
pub struct RecordMetadata {
    pub created_by: Option<String>,
    pub source: Option<String>,
    pub correlation_id: Option<String>,
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

crate::objects_only!(RecordMetadata);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Thing {
        title: String,
    }

    #[test]
    fn text_or_object_keeps_each_form_and_names_an_unknown_field() {
        let t: Vec<TextOr<Thing>> = serde_json::from_str(r#"["a", {"title": "b"}]"#).unwrap();
        assert_eq!(t[0], TextOr::Text("a".into()));
        assert_eq!(t[1], TextOr::Object(Thing { title: "b".into() }));
        let e = serde_json::from_str::<TextOr<Thing>>(r#"{"title": "b", "colour": 1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("colour"), "{e}");
        let e = serde_json::from_str::<TextOr<Thing>>("3")
            .unwrap_err()
            .to_string();
        assert!(e.contains("text or an object"), "{e}");
    }

    #[test]
    fn a_record_is_an_object_never_a_list_of_its_fields() {
        let e = serde_json::from_str::<RecordMetadata>("[null, null]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected an object, not a list"), "{e}");
        let e =
            serde_json::from_str::<crate::HarnessContract>(r#"{"goal": "g", "metadata": ["a"]}"#)
                .unwrap_err()
                .to_string();
        assert!(e.contains("expected an object"), "{e}");
        let m: RecordMetadata = serde_json::from_str(r#"{"createdBy": "ana"}"#).unwrap();
        assert_eq!(m.created_by.as_deref(), Some("ana"));
        assert_eq!(
            serde_json::to_string(&m).unwrap(),
            r#"{"createdBy":"ana","properties":{}}"#
        );
    }

    #[test]
    fn confidence_is_a_score_or_a_level() {
        let c: Confidence = serde_json::from_str("0.5").unwrap();
        assert_eq!(c, Confidence::Score(0.5));
        let c: Confidence = serde_json::from_str(r#""high""#).unwrap();
        assert_eq!(c, Confidence::Level(ConfidenceLevel::High));
        assert_eq!(serde_json::to_string(&c).unwrap(), r#""high""#);
        let e = serde_json::from_str::<Confidence>(r#""sure""#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown, low, medium, high"), "{e}");
    }
}
