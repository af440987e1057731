//! A plan drawn as a graph: an SVG of its steps, left to right by how deep
//! each lies in the dependencies, an arrow from each step to the steps that
//! need it, every step coloured by its state. An arrow to the next column is
//! a curve through the gap between the two; one that reaches further runs
//! in the gaps between columns and the corridors between rows, so it never
//! passes under a box it does not connect. Drawn on the server, so it is
//! live the way the rest of the task page is (fetched again on a change).

use std::collections::HashMap;

use maud::{Markup, html};
use rein_protocol::TaskStep;

const WIDTH: i64 = 168;
const HEIGHT: i64 = 40;
const GAP_X: i64 = 48;
const GAP_Y: i64 = 18;
/// Room above the first row: the corridor long arrows may take there.
const TOP: i64 = GAP_Y;
/// The most characters of a step's id a box shows (all of it is its title).
const LABEL: usize = 20;

/// Where each step goes: its column (the longest chain of dependencies
/// before it) and its row in that column, in plan order.
fn layout(steps: &[TaskStep]) -> Vec<(usize, usize)> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut depth: Vec<Option<usize>> = vec![None; steps.len()];
    // A validated plan has no cycles; a step is visited once per path at
    // most as deep as the plan is long, and a cycle (never stored) would be
    // cut there rather than loop.
    fn depth_of(
        i: usize,
        steps: &[TaskStep],
        index: &HashMap<&str, usize>,
        depth: &mut Vec<Option<usize>>,
        budget: usize,
    ) -> usize {
        if let Some(d) = depth[i] {
            return d;
        }
        if budget == 0 {
            return 0;
        }
        let d = steps[i]
            .depends_on
            .iter()
            .filter_map(|dep| index.get(dep.as_str()).copied())
            .map(|j| depth_of(j, steps, index, depth, budget - 1) + 1)
            .max()
            .unwrap_or(0);
        depth[i] = Some(d);
        d
    }
    let mut rows: HashMap<usize, usize> = HashMap::new();
    (0..steps.len())
        .map(|i| {
            let column = depth_of(i, steps, &index, &mut depth, steps.len());
            let row = rows.entry(column).or_insert(0);
            *row += 1;
            (column, *row - 1)
        })
        .collect()
}

fn label(id: &str) -> String {
    if id.chars().count() <= LABEL {
        id.to_owned()
    } else {
        let head: String = id.chars().take(LABEL - 1).collect();
        format!("{head}…")
    }
}

/// The top-left corner of the box in `(column, row)`.
fn origin((column, row): (usize, usize)) -> (i64, i64) {
    (
        1 + column as i64 * (WIDTH + GAP_X),
        TOP + row as i64 * (HEIGHT + GAP_Y),
    )
}

/// How an arrow runs: a curve to the next column, or straight lines
/// through the gaps and corridors to a column further on.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Route {
    Curve(i64, i64, i64, i64),
    Lanes(Vec<(i64, i64)>),
}

impl Route {
    fn path(&self) -> String {
        match self {
            Route::Curve(x1, y1, x2, y2) => {
                let bend = (x2 - x1) / 2;
                format!(
                    "M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}",
                    x1 + bend,
                    x2 - bend
                )
            }
            Route::Lanes(points) => points
                .iter()
                .enumerate()
                .map(|(i, (x, y))| format!("{}{x},{y}", if i == 0 { "M" } else { " L" }))
                .collect(),
        }
    }
}

/// The arrows of the plan, one per dependency: from the needed step's
/// right side to the needing step's left. The `k`th long arrow is moved a
/// little off its lanes (-3, 0 or +3) so that arrows sharing a gap or a
/// corridor are told apart.
fn routes(steps: &[TaskStep], places: &[(usize, usize)], rows: usize) -> Vec<Route> {
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut long = 0i64;
    let mut out = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        for dep in &step.depends_on {
            let Some(&j) = index.get(dep.as_str()) else {
                continue;
            };
            let (x1, y1) = origin(places[j]);
            let (x2, y2) = origin(places[i]);
            let (x1, y1, x2, y2) = (x1 + WIDTH, y1 + HEIGHT / 2, x2, y2 + HEIGHT / 2);
            if places[i].0 <= places[j].0 + 1 {
                out.push(Route::Curve(x1, y1, x2, y2));
                continue;
            }
            // The corridor (above row k; k = rows is below the last) that
            // is nearest both ends.
            let corridor = |k: usize| TOP + k as i64 * (HEIGHT + GAP_Y) - GAP_Y / 2;
            let k = (0..=rows)
                .min_by_key(|&k| (corridor(k) - y1).abs() + (corridor(k) - y2).abs())
                .unwrap_or(0);
            let shift = (long % 3 - 1) * 3;
            long += 1;
            let (out_x, in_x, lane) = (
                x1 + GAP_X / 2 + shift,
                x2 - GAP_X / 2 + shift,
                corridor(k) + shift,
            );
            out.push(Route::Lanes(vec![
                (x1, y1),
                (out_x, y1),
                (out_x, lane),
                (in_x, lane),
                (in_x, y2),
                (x2, y2),
            ]));
        }
    }
    out
}

/// The graph of `steps`, each in the state `state_of` gives it.
pub fn plan_graph(steps: &[TaskStep], state_of: impl Fn(&str) -> &'static str) -> Markup {
    let places = layout(steps);
    let columns = places.iter().map(|p| p.0).max().map_or(0, |c| c + 1) as i64;
    let rows = places.iter().map(|p| p.1).max().map_or(0, |r| r + 1);
    let width = columns * (WIDTH + GAP_X) - GAP_X + 2;
    let height = TOP + rows as i64 * (HEIGHT + GAP_Y) + 2;
    let edges = routes(steps, &places, rows);
    let summary = format!(
        "The plan's {} step(s) as a graph, each pointing to the steps that need it",
        steps.len()
    );
    html! {
        figure.graph {
            svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label=(summary)
                viewBox={"0 0 " (width) " " (height)} width=(width) height=(height) {
                defs {
                    marker #arrow viewBox="0 0 8 8" refX="8" refY="4" markerWidth="8" markerHeight="8" orient="auto" {
                        path d="M0,0 L8,4 L0,8 z" class="arrowhead" {}
                    }
                }
                @for route in &edges {
                    path.edge marker-end="url(#arrow)" d=(route.path()) {}
                }
                @for (step, place) in steps.iter().zip(&places) {
                    @let (x, y) = origin(*place);
                    @let state = state_of(&step.id);
                    a href={"#step-" (step.id)} {
                        g data-step=(step.id) data-state=(state) class={"node g-" (state)} {
                            title { (step.id) " — " (state) }
                            rect x=(x) y=(y) width=(WIDTH) height=(HEIGHT) rx="6" {}
                            text x=(x + 10) y=(y + 17) { (label(&step.id)) }
                            text.state x=(x + 10) y=(y + 32) { (state.replace('_', " ")) }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(id: &str, needs: &[&str]) -> TaskStep {
        let mut step: TaskStep = serde_json::from_value(serde_json::json!({
            "id": id, "checkpoint": "task_exec", "action": { "kind": "command", "run": "true" },
        }))
        .unwrap();
        step.depends_on = needs.iter().map(|s| (*s).to_owned()).collect();
        step
    }

    #[test]
    fn columns_follow_the_longest_chain_and_rows_the_plan_order() {
        let steps = [
            step("fetch", &[]),
            step("lint", &[]),
            step("build", &["fetch"]),
            step("test", &["build", "lint"]),
            step("docs", &["fetch"]),
        ];
        assert_eq!(layout(&steps), [(0, 0), (0, 1), (1, 0), (2, 0), (1, 1)]);
        let svg = plan_graph(
            &steps,
            |id| if id == "build" { "failed" } else { "waiting" },
        )
        .into_string();
        // One arrow per dependency, one box per step in its state.
        assert_eq!(svg.matches("class=\"edge\"").count(), 4);
        assert!(svg.contains(r#"data-step="build" data-state="failed" class="node g-failed""#));
        assert_eq!(svg.matches("<rect").count(), 5);
    }

    /// Whether the segment from `a` to `b` (level or upright) passes
    /// through the inside of the box at `(x, y)`.
    fn crosses(a: (i64, i64), b: (i64, i64), (x, y): (i64, i64)) -> bool {
        let (lo_x, hi_x) = (a.0.min(b.0), a.0.max(b.0));
        let (lo_y, hi_y) = (a.1.min(b.1), a.1.max(b.1));
        lo_x < x + WIDTH && hi_x > x && lo_y < y + HEIGHT && hi_y > y
    }

    #[test]
    fn an_arrow_past_the_next_column_goes_around_the_boxes_between() {
        // lint → release skips two columns whose rows 0 and 1 are taken.
        let steps = [
            step("fetch", &[]),
            step("lint", &[]),
            step("build", &["fetch"]),
            step("unit-tests", &["build"]),
            step("api-tests", &["build"]),
            step("release", &["unit-tests", "api-tests", "lint"]),
        ];
        let places = layout(&steps);
        assert_eq!(places[1], (0, 1));
        assert_eq!(places[5], (3, 0));
        let rows = places.iter().map(|p| p.1).max().unwrap() + 1;
        let routes = routes(&steps, &places, rows);
        assert_eq!(routes.len(), 6);
        let long: Vec<&Vec<(i64, i64)>> = routes
            .iter()
            .filter_map(|r| match r {
                Route::Lanes(points) => Some(points),
                Route::Curve(..) => None,
            })
            .collect();
        assert_eq!(long.len(), 1, "only lint → release skips a column");
        let points = long[0];
        // From lint's right side to release's left, by level and upright lines only.
        let (lint, release) = (origin(places[1]), origin(places[5]));
        assert_eq!(points[0], (lint.0 + WIDTH, lint.1 + HEIGHT / 2));
        assert_eq!(*points.last().unwrap(), (release.0, release.1 + HEIGHT / 2));
        for pair in points.windows(2) {
            assert!(pair[0].0 == pair[1].0 || pair[0].1 == pair[1].1, "{pair:?}");
            for (k, place) in places.iter().enumerate() {
                assert!(
                    !crosses(pair[0], pair[1], origin(*place)),
                    "the arrow runs through {}: {pair:?}",
                    steps[k].id
                );
            }
        }
        // The straight line it replaces would have run through unit-tests' row 1 neighbour.
        assert!(crosses(
            (lint.0 + WIDTH, lint.1 + HEIGHT / 2),
            (release.0, lint.1 + HEIGHT / 2),
            origin(places[4])
        ));
    }

    #[test]
    fn a_long_id_is_cut_in_its_box_and_whole_in_its_title() {
        let long = "a-step-whose-id-goes-on-and-on";
        let svg = plan_graph(&[step(long, &[])], |_| "waiting").into_string();
        assert!(svg.contains("a-step-whose-id-goe…"));
        assert!(svg.contains(&format!("<title>{long} — waiting</title>")));
    }
}
