//! Conflict detection over a shared harness state (spec shared-state §2):
//! write/write, read/write against version dependencies, assumptions that
//! disagree, and risky writes with no verifier. Resources are indexed (by id,
//! key, uri and normalised path, directories covering what lies beneath them), so
//! the cost follows the number of resources and real overlaps, not the number of
//! action pairs. The output is deterministic: the same state gives the same
//! conflicts, in the same order, with the same ids.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use rein_protocol::{
    Action, Conflict, ConflictPolicy, ConflictStatus, ConflictType, Resource, Risk,
    SharedHarnessState,
};
use sha2::{Digest, Sha256};

/// A resource whose path climbs above its root: invalid input.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{owner}: resource path `{path}` climbs above its root (`..`)")]
pub struct InvalidResource {
    pub owner: String,
    pub path: String,
}

/// A path with `\` as `/`, `.` and `..` resolved and no trailing `/`.
pub fn normalise_path(path: &str) -> Option<String> {
    normalised(path).map(Cow::into_owned)
}

/// Whether `path` is normal already: no `\\`, no empty, `.` or `..` part, no
/// trailing `/` (one pass over its bytes).
fn is_plain(path: &str) -> bool {
    let bytes = path.as_bytes();
    // The length of the part so far, and whether it is all dots.
    let (mut len, mut dots) = (0usize, true);
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'\\' => return false,
            b'/' => {
                let empty_inside = len == 0 && i > 0;
                if empty_inside || (len > 0 && dots && len <= 2) {
                    return false;
                }
                (len, dots) = (0, true);
            }
            _ => {
                len += 1;
                dots &= b == b'.';
            }
        }
    }
    let trailing_slash = bytes.len() > 1 && bytes.last() == Some(&b'/');
    let dot_part_last = len > 0 && dots && len <= 2;
    !trailing_slash && !dot_part_last
}

/// [`normalise_path`], borrowing when the path is already normal (most are).
fn normalised(path: &str) -> Option<Cow<'_, str>> {
    if is_plain(path) {
        return Some(Cow::Borrowed(path));
    }
    let path = path.replace('\\', "/");
    let absolute = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    Some(Cow::Owned(if absolute {
        format!("/{joined}")
    } else {
        joined
    }))
}

/// Checks that no resource path in `state` climbs above its root.
pub fn check_state(state: &SharedHarnessState) -> Result<(), InvalidResource> {
    check_resources(
        state
            .shared_read_set
            .iter()
            .chain(&state.shared_write_set)
            .chain(
                state
                    .version_dependencies
                    .iter()
                    .filter_map(|d| d.resource.as_ref()),
            )
            .chain(
                state
                    .verifier_obligations
                    .iter()
                    .filter_map(|o| o.resource.as_ref()),
            ),
        || "the state".to_owned(),
    )?;
    state.actions.iter().try_for_each(check_action)
}

/// Checks that no resource path of `action` climbs above its root.
pub fn check_action(action: &Action) -> Result<(), InvalidResource> {
    check_resources(
        action
            .read_set
            .iter()
            .chain(&action.write_set)
            .chain(
                action
                    .version_dependencies
                    .iter()
                    .filter_map(|d| d.resource.as_ref()),
            )
            .chain(
                action
                    .verifier_obligations
                    .iter()
                    .filter_map(|o| o.resource.as_ref()),
            ),
        || format!("action `{}`", action.id),
    )
}

/// Checks that none of `resources` (held by `owner`) climbs above its root.
pub(crate) fn check_resources_of<'a>(
    resources: impl IntoIterator<Item = &'a Resource>,
    owner: &str,
) -> Result<(), InvalidResource> {
    check_resources(resources, || owner.to_owned())
}

fn check_resources<'a>(
    resources: impl IntoIterator<Item = &'a Resource>,
    owner: impl Fn() -> String,
) -> Result<(), InvalidResource> {
    for r in resources {
        if let Some(p) = &r.path
            && normalised(p).is_none()
        {
            return Err(InvalidResource {
                owner: owner(),
                path: p.clone(),
            });
        }
    }
    Ok(())
}

fn is_directory(r: &Resource) -> bool {
    r.kind.eq_ignore_ascii_case("directory") || r.kind.eq_ignore_ascii_case("dir")
}

/// A resource ready to compare: its identities and normalised path.
#[derive(Debug, Clone)]
struct Entry<'a> {
    action: usize,
    resource: &'a Resource,
    path: Option<Cow<'a, str>>,
}

impl<'a> Entry<'a> {
    /// `owner` names what holds the resource, for the error (made only then).
    fn new(
        action: usize,
        resource: &'a Resource,
        owner: impl Fn() -> String,
    ) -> Result<Entry<'a>, InvalidResource> {
        let path = match &resource.path {
            Some(p) => Some(normalised(p).ok_or_else(|| InvalidResource {
                owner: owner(),
                path: p.clone(),
            })?),
            None => None,
        };
        Ok(Entry {
            action,
            resource,
            path,
        })
    }

    /// Whether two resources are the same (spec rule 5), or one is a directory
    /// holding the other.
    fn overlaps(&self, other: &Entry<'_>) -> bool {
        let (a, b) = (self.resource, other.resource);
        let same_field = |x: &Option<String>, y: &Option<String>| x.is_some() && x == y;
        if same_field(&a.id, &b.id) || same_field(&a.key, &b.key) || same_field(&a.uri, &b.uri) {
            return true;
        }
        match (&self.path, &other.path) {
            (Some(p), Some(q)) if p == q => a.kind.eq_ignore_ascii_case(&b.kind),
            (Some(p), Some(q)) => {
                (is_directory(a) && beneath(q, p)) || (is_directory(b) && beneath(p, q))
            }
            _ => false,
        }
    }
}

/// Whether `path` lies beneath directory `dir`, at a `/` boundary (the relative
/// root `""` holds every relative path, `/` every absolute one).
fn beneath(path: &str, dir: &str) -> bool {
    if dir.is_empty() {
        return !path.starts_with('/') && !path.is_empty();
    }
    if dir == "/" {
        return path.len() > 1 && path.starts_with('/');
    }
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// Entries grouped by one string (an id, a key, a uri, a path): the newest entry
/// of each group, and for every entry the one added before it in its group. One
/// map and one vector, however many groups: no allocation per group.
struct Groups<'a> {
    newest: FxHashMap<Cow<'a, str>, u32>,
    previous: Vec<u32>,
}

const NONE: u32 = u32::MAX;

impl<'a> Groups<'a> {
    /// Room for `entries` entries in about `groups` groups.
    fn with_capacity(entries: usize, groups: usize) -> Groups<'a> {
        let mut newest = FxHashMap::default();
        newest.reserve(groups);
        Groups {
            newest,
            previous: Vec::with_capacity(entries),
        }
    }

    /// Adds entry `n` (the entries are numbered in order) to group `key`, if any.
    fn add(&mut self, n: usize, key: Option<Cow<'a, str>>) {
        let before = match key {
            Some(k) => self.newest.insert(k, n as u32).unwrap_or(NONE),
            None => NONE,
        };
        self.previous.push(before);
    }

    /// Every entry of group `key`, onto `out`.
    fn get(&self, key: &str, out: &mut Vec<usize>) {
        let mut at = self.newest.get(key).copied().unwrap_or(NONE);
        while at != NONE {
            out.push(at as usize);
            at = self.previous[at as usize];
        }
    }
}

/// The directories above `path`, nearest first: for `a/b/c`, `a/b`, `a` and the
/// relative root `""`; for `/srv/x`, `/srv` and `/`.
fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    let relative = !path.starts_with('/') && !path.is_empty();
    let mut rest = Some(path);
    std::iter::from_fn(move || {
        let dir = rest?;
        match dir.rfind('/') {
            Some(0) => {
                rest = None;
                (dir.len() > 1).then_some("/")
            }
            Some(cut) => {
                rest = Some(&dir[..cut]);
                rest
            }
            None => {
                rest = None;
                relative.then_some("")
            }
        }
    })
}

/// Where the writes are, to find what a resource overlaps without scanning.
struct Index<'a> {
    entries: Vec<Entry<'a>>,
    by_id: Groups<'a>,
    by_key: Groups<'a>,
    by_uri: Groups<'a>,
    by_path: Groups<'a>,
    /// Directory entries, by path.
    dirs: Groups<'a>,
    /// For each directory that will be looked up, the entries beneath it.
    beneath: FxHashMap<Cow<'a, str>, Vec<u32>>,
}

impl<'a> Index<'a> {
    /// An index for `n` entries; `probed` are the directories whose contents
    /// will be asked for.
    fn new(n: usize, probed: &[Cow<'a, str>]) -> Index<'a> {
        Index {
            entries: Vec::with_capacity(n),
            by_id: Groups::with_capacity(n, 0),
            by_key: Groups::with_capacity(n, 0),
            by_uri: Groups::with_capacity(n, 0),
            by_path: Groups::with_capacity(n, n),
            dirs: Groups::with_capacity(n, 0),
            beneath: probed.iter().map(|d| (d.clone(), Vec::new())).collect(),
        }
    }

    fn add(&mut self, entry: Entry<'a>) {
        let n = self.entries.len();
        let r = entry.resource;
        let borrowed = |v: &'a Option<String>| v.as_deref().map(Cow::Borrowed);
        self.by_id.add(n, borrowed(&r.id));
        self.by_key.add(n, borrowed(&r.key));
        self.by_uri.add(n, borrowed(&r.uri));
        self.by_path.add(n, entry.path.clone());
        self.dirs
            .add(n, entry.path.clone().filter(|_| is_directory(r)));
        if !self.beneath.is_empty()
            && let Some(path) = &entry.path
        {
            for dir in ancestors(path) {
                if let Some(found) = self.beneath.get_mut(dir) {
                    found.push(n as u32);
                }
            }
        }
        self.entries.push(entry);
    }

    /// The entries that overlap `probe`, each once, in order, into `out` (cleared first).
    fn overlapping(&self, probe: &Entry<'_>, out: &mut Vec<usize>) {
        out.clear();
        let r = probe.resource;
        for (groups, value) in [
            (&self.by_id, &r.id),
            (&self.by_key, &r.key),
            (&self.by_uri, &r.uri),
        ] {
            if let Some(v) = value {
                groups.get(v, out);
            }
        }
        if let Some(path) = &probe.path {
            self.by_path.get(path, out);
            for dir in ancestors(path) {
                self.dirs.get(dir, out);
            }
            // What lies beneath it, if it is a directory (every directory probed
            // was named when the index was made).
            if is_directory(r)
                && let Some(found) = self.beneath.get(path.as_ref())
            {
                out.extend(found.iter().map(|&i| i as usize));
            }
        }
        out.sort_unstable();
        out.dedup();
        out.retain(|&i| self.entries[i].overlaps(probe));
    }
}

/// An action's risk; none given and the seed's `unknown` count as low.
fn risk_of(action: &Action) -> Risk {
    match action.risk_level {
        None | Some(Risk::Unknown) => Risk::Low,
        Some(r) => r,
    }
}

fn policy_for(severity: Risk) -> ConflictPolicy {
    match severity {
        Risk::Unknown | Risk::Low | Risk::Medium => ConflictPolicy::Warn,
        Risk::High | Risk::Critical => ConflictPolicy::Escalate,
    }
}

/// How a resource is named in summaries.
fn label(r: &Resource) -> String {
    r.path
        .clone()
        .or_else(|| r.key.clone())
        .or_else(|| r.id.clone())
        .or_else(|| r.uri.clone())
        .unwrap_or_else(|| r.kind.clone())
}

/// A stable id from what the conflict is about.
fn conflict_id(kind: ConflictType, parts: &[&str]) -> String {
    let mut hash = Sha256::new();
    hash.update(kind.as_str());
    for p in parts {
        hash.update([0u8]);
        hash.update(p.as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    format!("cfl_{hex}")
}

struct Builder<'s> {
    state: &'s SharedHarnessState,
    out: Vec<Conflict>,
}

impl Builder<'_> {
    fn participants(&self, actions: &[usize]) -> Vec<String> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for &a in actions {
            if let Some(p) = &self.state.actions[a].participant_id
                && seen.insert(p.clone())
            {
                out.push(p.clone());
            }
        }
        out
    }

    fn pair(&mut self, kind: ConflictType, a: usize, b: usize, resources: Vec<Resource>) {
        let (x, y) = (&self.state.actions[a], &self.state.actions[b]);
        let severity = risk_of(x).max(risk_of(y));
        let names: Vec<String> = resources.iter().map(label).collect();
        let (summary, recommendation) = match kind {
            ConflictType::WriteWrite => (
                format!(
                    "`{}` and `{}` both write {}",
                    x.title,
                    y.title,
                    names.join(", ")
                ),
                "serialize these actions or merge their changes, and have the result reviewed"
                    .to_owned(),
            ),
            _ => (
                format!(
                    "`{}` depends on the version it read of {}, which `{}` writes",
                    x.title,
                    names.join(", "),
                    y.title
                ),
                format!(
                    "re-read {} after `{}` completes, or hold `{}` until `{}` is done",
                    names.join(", "),
                    y.title,
                    y.title,
                    x.title
                ),
            ),
        };
        let mut id_parts: Vec<&str> = vec![x.id.as_str(), y.id.as_str()];
        id_parts.extend(names.iter().map(String::as_str));
        self.out.push(Conflict {
            id: conflict_id(kind, &id_parts),
            conflict_type: kind,
            summary,
            participants: self.participants(&[a, b]),
            actions: vec![x.id.clone(), y.id.clone()],
            resources,
            policy: policy_for(severity),
            severity,
            status: ConflictStatus::Open,
            recommendation,
        });
    }
}

/// Adds `r` to `list` unless an equal resource is there.
fn push_unique(list: &mut Vec<Resource>, r: &Resource) {
    if !list.contains(r) {
        list.push(r.clone());
    }
}

/// The conflicts in `state`, in a stable order: write/write, read/write,
/// assumption, then verifier obligation; within each, by the actions' order.
pub fn detect(state: &SharedHarnessState) -> Result<Vec<Conflict>, InvalidResource> {
    let mut builder = Builder {
        state,
        out: Vec::new(),
    };
    // Every write, indexed.
    // The directories that will be looked up: every directory written or read.
    let mut probed: Vec<Cow<'_, str>> = Vec::new();
    for (i, action) in state.actions.iter().enumerate() {
        for r in action.write_set.iter().chain(&action.read_set) {
            if is_directory(r)
                && let Some(path) = Entry::new(i, r, || format!("action `{}`", action.id))?.path
            {
                probed.push(path);
            }
        }
    }
    probed.sort_unstable();
    probed.dedup();
    let mut writes = Index::new(
        state.actions.iter().map(|a| a.write_set.len()).sum(),
        &probed,
    );
    for (i, action) in state.actions.iter().enumerate() {
        for r in &action.write_set {
            writes.add(Entry::new(i, r, || format!("action `{}`", action.id))?);
        }
    }

    // 1. write/write: one conflict per pair of actions, every shared resource.
    let mut pairs: BTreeMap<(usize, usize), Vec<Resource>> = BTreeMap::new();
    let mut found = Vec::new();
    for e in &writes.entries {
        writes.overlapping(e, &mut found);
        for &j in &found {
            let other = &writes.entries[j];
            if other.action <= e.action {
                continue;
            }
            let shared = pairs.entry((e.action, other.action)).or_default();
            push_unique(shared, e.resource);
            push_unique(shared, other.resource);
        }
    }
    for ((a, b), resources) in pairs {
        builder.pair(ConflictType::WriteWrite, a, b, resources);
    }

    // 2. read/write: a read pinned by a version dependency, written by another.
    let state_deps: Vec<Entry<'_>> = state
        .version_dependencies
        .iter()
        .filter_map(|d| d.resource.as_ref())
        .map(|r| Entry::new(usize::MAX, r, || "the state's version dependency".into()))
        .collect::<Result<_, _>>()?;
    let mut read_pairs: BTreeMap<(usize, usize), Vec<Resource>> = BTreeMap::new();
    let mut deps: Vec<Entry<'_>> = Vec::new();
    for (i, action) in state.actions.iter().enumerate() {
        if action.read_set.is_empty() {
            continue;
        }
        let owner = || format!("action `{}`", action.id);
        deps.clear();
        for r in action
            .version_dependencies
            .iter()
            .filter_map(|d| d.resource.as_ref())
        {
            deps.push(Entry::new(i, r, owner)?);
        }
        if deps.is_empty() && state_deps.is_empty() {
            continue;
        }
        for r in &action.read_set {
            let read = Entry::new(i, r, owner)?;
            let pinned = deps.iter().chain(&state_deps).any(|d| d.overlaps(&read));
            if !pinned {
                continue;
            }
            writes.overlapping(&read, &mut found);
            for &j in &found {
                let writer = writes.entries[j].action;
                if writer != i {
                    push_unique(read_pairs.entry((i, writer)).or_default(), r);
                }
            }
        }
    }
    for ((reader, writer), resources) in read_pairs {
        builder.pair(ConflictType::ReadWrite, reader, writer, resources);
    }

    // 3. assumptions: one key (any case), different values.
    let mut by_key: BTreeMap<String, BTreeMap<String, Vec<Option<usize>>>> = BTreeMap::new();
    let holders = std::iter::once((None, &state.assumptions)).chain(
        state
            .actions
            .iter()
            .enumerate()
            .map(|(i, a)| (Some(i), &a.assumptions)),
    );
    for (holder, assumptions) in holders {
        for a in assumptions {
            if let (Some(key), Some(value)) = (&a.key, &a.value) {
                by_key
                    .entry(key.to_lowercase())
                    .or_default()
                    .entry(value.clone())
                    .or_default()
                    .push(holder);
            }
        }
    }
    for (key, values) in &by_key {
        let values: Vec<(&String, &Vec<Option<usize>>)> = values.iter().collect();
        for (x, (v1, h1)) in values.iter().enumerate() {
            for (v2, h2) in &values[x + 1..] {
                let actions: Vec<usize> = h1.iter().chain(h2.iter()).flatten().copied().collect();
                let ids: Vec<String> = actions
                    .iter()
                    .map(|&a| state.actions[a].id.clone())
                    .collect();
                let mut parts: Vec<&str> = vec![key.as_str(), v1.as_str(), v2.as_str()];
                parts.extend(ids.iter().map(String::as_str));
                builder.out.push(Conflict {
                    id: conflict_id(ConflictType::Assumption, &parts),
                    conflict_type: ConflictType::Assumption,
                    summary: format!("assumption `{key}` is `{v1}` in one place and `{v2}` in another"),
                    participants: builder.participants(&actions),
                    actions: ids,
                    resources: Vec::new(),
                    policy: ConflictPolicy::Warn,
                    severity: Risk::Medium,
                    status: ConflictStatus::Open,
                    recommendation: format!(
                        "agree on one value of `{key}` and verify it before the work that relies on it completes"
                    ),
                });
            }
        }
    }

    // 4. risky writes with no required verifier, on the action or the state.
    let state_verified = state.verifier_obligations.iter().any(|o| o.required);
    for (i, action) in state.actions.iter().enumerate() {
        let risk = risk_of(action);
        if risk < Risk::High || action.write_set.is_empty() {
            continue;
        }
        if state_verified || action.verifier_obligations.iter().any(|o| o.required) {
            continue;
        }
        builder.out.push(Conflict {
            id: conflict_id(ConflictType::VerifierObligation, &[action.id.as_str()]),
            conflict_type: ConflictType::VerifierObligation,
            summary: format!(
                "`{}` is {} risk and writes {} resource(s) with no required verifier",
                action.title,
                risk.as_str(),
                action.write_set.len()
            ),
            participants: builder.participants(&[i]),
            actions: vec![action.id.clone()],
            resources: action.write_set.clone(),
            policy: ConflictPolicy::Escalate,
            severity: risk,
            status: ConflictStatus::Open,
            recommendation:
                "add a required verifier obligation (a reviewer or a tester) before it completes"
                    .to_owned(),
        });
    }
    Ok(builder.out)
}
