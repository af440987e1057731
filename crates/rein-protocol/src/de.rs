//! Deserializers for numbers as the API's document describes them: a number
//! JSON Schema calls an integer is taken as one (`2.0` included), and a
//! bounded one is refused outside its bounds, naming them, never clamped.

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// An optional integer that JSON Schema would call one: `2` and `2.0` alike
/// (the document's `"type": "integer"` admits both), refused when it has a
/// fraction or does not fit `T`.
pub fn integral<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<i128>,
{
    let Some(value) = Option::<Integral>::deserialize(d)? else {
        return Ok(None);
    };
    T::try_from(value.0).map(Some).map_err(|_| {
        de::Error::custom(format_args!(
            "{} does not fit here: it must be from {} to {}",
            value.0,
            bound::<T>(false),
            bound::<T>(true)
        ))
    })
}

/// The smallest or largest `i128` that fits `T`, found by trying the
/// widths an integer field has here.
fn bound<T: TryFrom<i128>>(largest: bool) -> i128 {
    let candidates: [i128; 4] = if largest {
        [
            u64::MAX.into(),
            i64::MAX.into(),
            u32::MAX.into(),
            i32::MAX.into(),
        ]
    } else {
        [i64::MIN.into(), i32::MIN.into(), 0, 0]
    };
    candidates
        .into_iter()
        .find(|c| T::try_from(*c).is_ok())
        .unwrap_or(0)
}

/// An integer, from a JSON integer or a float with no fraction.
struct Integral(i128);

impl<'de> Deserialize<'de> for Integral {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Integral, D::Error> {
        struct Whole;
        impl Visitor<'_> for Whole {
            type Value = Integral;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Integral, E> {
                Ok(Integral(v.into()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Integral, E> {
                Ok(Integral(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Integral, E> {
                // Past 2^63 every f64 is whole, but not exactly the number
                // that was written: refused rather than rounded.
                if v.fract() == 0.0 && v.abs() < 9.2e18 {
                    #[allow(clippy::cast_possible_truncation)]
                    Ok(Integral(v as i128))
                } else {
                    Err(E::custom(format_args!("{v} is not an integer")))
                }
            }
        }
        d.deserialize_any(Whole)
    }
}

/// Deserializes an optional integer that must lie in `MIN..=MAX`, refusing
/// any other with an error that names the bounds — the same bounds the
/// document gives it, so the server never quietly clamps what the document
/// says it refuses. Query strings carry numbers as text: they are parsed.
pub fn within<'de, D, T, const MIN: u64, const MAX: u64>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let Some(value) = Option::<u64>::deserialize(d)? else {
        return Ok(None);
    };
    if !(MIN..=MAX).contains(&value) {
        return Err(de::Error::custom(format_args!(
            "{value} is out of range: it must be from {MIN} to {MAX}"
        )));
    }
    T::try_from(value)
        .map(Some)
        .map_err(|_| de::Error::custom(format_args!("{value} is too large here")))
}

/// An optional id that refers to another record (an evidence bundle, a
/// contract, a shared state, a session, a task): absent or null is none, and
/// empty text is refused — it refers to nothing, and as a path segment it
/// would name another route.
pub fn reference<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    match Option::<String>::deserialize(d)? {
        Some(s) if s.is_empty() => Err(de::Error::custom(
            "an id that refers to another record must not be empty; leave the field out instead",
        )),
        other => Ok(other),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Item {
        #[serde(default, deserialize_with = "super::integral")]
        code: Option<i32>,
        #[serde(default, deserialize_with = "super::integral")]
        count: Option<u32>,
    }

    #[test]
    fn an_empty_reference_is_refused() {
        #[derive(Debug, serde::Deserialize)]
        struct R {
            #[serde(default, deserialize_with = "super::reference")]
            id: Option<String>,
        }
        assert_eq!(
            serde_json::from_str::<R>(r#"{"id": "x"}"#)
                .unwrap()
                .id
                .as_deref(),
            Some("x")
        );
        assert_eq!(
            serde_json::from_str::<R>(r#"{"id": null}"#).unwrap().id,
            None
        );
        assert_eq!(serde_json::from_str::<R>("{}").unwrap().id, None);
        let e = serde_json::from_str::<R>(r#"{"id": ""}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("must not be empty"), "{e}");
    }

    #[test]
    fn an_integer_is_taken_whole_or_as_a_float_without_a_fraction() {
        let item: Item = serde_json::from_str(r#"{"code": -4493.0, "count": 7}"#).unwrap();
        assert_eq!((item.code, item.count), (Some(-4493), Some(7)));
        let item: Item = serde_json::from_str(r#"{"code": null}"#).unwrap();
        assert_eq!((item.code, item.count), (None, None));
        for (body, says) in [
            (r#"{"code": 1.5}"#, "1.5 is not an integer"),
            (r#"{"count": -1}"#, "must be from 0 to 4294967295"),
            (
                r#"{"code": 3000000000}"#,
                "must be from -2147483648 to 2147483647",
            ),
            (r#"{"count": "7"}"#, "an integer"),
            (r#"{"count": 1e300}"#, "is not an integer"),
        ] {
            let e = serde_json::from_str::<Item>(body).unwrap_err().to_string();
            assert!(e.contains(says), "{body}: {e}");
        }
    }

    #[test]
    fn a_plans_integers_may_be_written_as_whole_floats() {
        let mut plan =
            serde_json::to_value(crate::TaskDecomposition::new("t", Vec::new())).unwrap();
        plan["max_parallel"] = serde_json::json!(2.0);
        plan["estimated_duration_s"] = serde_json::json!(30.0);
        let read: crate::TaskDecomposition = serde_json::from_value(plan.clone()).unwrap();
        assert_eq!(
            (read.max_parallel, read.estimated_duration_s),
            (Some(2), Some(30))
        );
        plan["max_parallel"] = serde_json::json!(2.5);
        let half = serde_json::from_value::<crate::TaskDecomposition>(plan).unwrap_err();
        assert!(half.to_string().contains("2.5 is not an integer"), "{half}");
    }
}
