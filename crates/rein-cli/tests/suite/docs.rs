//! The README and the book (`docs/src`): every relative link and image
//! points at a file that exists, every `#anchor` at a heading of its page
//! (named as mdBook names them), every page of the book is in its
//! `SUMMARY.md`, no page of the book links out of it, and the README stays
//! a five-minute read. `.ci/run` also builds the book with mdBook.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use std::collections::{BTreeSet, HashMap};
use std::path::{Component, Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `path` with `.` and `..` taken out, as a plain path.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The ids mdBook gives a page's headings: the text, lower-cased, letters,
/// digits, `-` and `_` kept, spaces as `-`; a repeated id gets `-1`, `-2`.
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut current: Option<String> = None;
    for event in Parser::new(text) {
        match event {
            Event::Start(Tag::Heading { .. }) => current = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(c) = current.as_mut() {
                    c.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                let text = current.take().unwrap_or_default();
                let id: String = text
                    .trim()
                    .to_lowercase()
                    .chars()
                    .filter_map(|c| {
                        if c.is_alphanumeric() || c == '-' || c == '_' {
                            Some(c)
                        } else if c.is_whitespace() {
                            Some('-')
                        } else {
                            None
                        }
                    })
                    .collect();
                let n = seen.entry(id.clone()).or_default();
                ids.insert(if *n == 0 {
                    id.clone()
                } else {
                    format!("{id}-{n}")
                });
                *n += 1;
            }
            _ => {}
        }
    }
    ids
}

/// Every relative link and image of a Markdown page.
fn links(text: &str) -> Vec<String> {
    Parser::new(text)
        .filter_map(|event| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some(dest_url.to_string())
            }
            _ => None,
        })
        .filter(|url| !url.contains("://") && !url.starts_with("mailto:"))
        .collect()
}

fn pages(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            pages(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

#[test]
fn every_link_of_the_readme_and_the_book_resolves() {
    let root = normal(&root());
    let book = root.join("docs/src");
    let mut files = vec![root.join("README.md")];
    pages(&book, &mut files);
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let in_book = file.starts_with(&book);
        for link in links(&text) {
            checked += 1;
            let (path, anchor) = match link.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if path.is_empty() {
                file.clone()
            } else {
                normal(&file.parent().unwrap().join(path))
            };
            let name = file.strip_prefix(&root).unwrap().display().to_string();
            if !target.exists() {
                broken.push(format!("{name}: `{link}`: no such file"));
                continue;
            }
            if in_book && !target.starts_with(&book) {
                broken.push(format!("{name}: `{link}` leaves the book (docs/src)"));
            }
            if let Some(anchor) = anchor
                && target.extension().is_some_and(|e| e == "md")
            {
                let ids = heading_ids(&std::fs::read_to_string(&target).unwrap());
                if !ids.contains(anchor) {
                    broken.push(format!("{name}: `{link}`: no heading `#{anchor}` there"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(
        checked > 50,
        "only {checked} links found: is the parser reading the files?"
    );
}

#[test]
fn every_page_of_the_book_is_in_its_summary_and_every_entry_is_a_page() {
    let book = normal(&root()).join("docs/src");
    let summary = std::fs::read_to_string(book.join("SUMMARY.md")).unwrap();
    let listed: BTreeSet<PathBuf> = links(&summary).iter().map(|l| book.join(l)).collect();
    let mut all = Vec::new();
    pages(&book, &mut all);
    let all: BTreeSet<PathBuf> = all
        .into_iter()
        .filter(|p| !p.ends_with("SUMMARY.md"))
        .collect();
    let missing: Vec<_> = all.difference(&listed).collect();
    let absent: Vec<_> = listed.difference(&all).collect();
    assert!(missing.is_empty(), "pages not in SUMMARY.md: {missing:?}");
    assert!(
        absent.is_empty(),
        "SUMMARY.md lists pages that do not exist: {absent:?}"
    );
}

#[test]
fn the_readme_is_a_short_read_that_starts_with_the_two_commands() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = text.lines().count();
    assert!(
        lines <= 300,
        "the README has {lines} lines; the book is for the rest"
    );
    let first_block: Vec<&str> = text
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .lines()
        .collect();
    assert!(first_block[0].starts_with("cargo run --release -p rein-cli -- run examples/"));
    assert!(first_block[1].starts_with("cargo test --workspace"));
    // The heading levels a reader skims: one title, sections under it.
    let titles = Parser::new(&text)
        .filter(|e| {
            matches!(
                e,
                Event::Start(Tag::Heading {
                    level: HeadingLevel::H1,
                    ..
                })
            )
        })
        .count();
    assert_eq!(titles, 1);
}
