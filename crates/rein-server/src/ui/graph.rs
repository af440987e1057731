//! A plan drawn as a graph: an SVG of its steps, left to right by how deep
//! each lies in the dependencies, an arrow from each step to the steps that
//! need it, every step coloured by its state. Drawn on the server, so it is
//! live the way the rest of the task page is (fetched again on a change).

use std::collections::HashMap;

use maud::{Markup, html};
use rein_protocol::TaskStep;

const WIDTH: i64 = 168;
const HEIGHT: i64 = 40;
const GAP_X: i64 = 48;
const GAP_Y: i64 = 14;
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

/// The graph of `steps`, each in the state `state_of` gives it.
pub fn plan_graph(steps: &[TaskStep], state_of: impl Fn(&str) -> &'static str) -> Markup {
    let places = layout(steps);
    let columns = places.iter().map(|p| p.0).max().map_or(0, |c| c + 1) as i64;
    let rows = places.iter().map(|p| p.1).max().map_or(0, |r| r + 1) as i64;
    let width = columns * (WIDTH + GAP_X) - GAP_X + 2;
    let height = rows * (HEIGHT + GAP_Y) - GAP_Y + 2;
    let origin = |(column, row): (usize, usize)| {
        (
            1 + column as i64 * (WIDTH + GAP_X),
            1 + row as i64 * (HEIGHT + GAP_Y),
        )
    };
    let index: HashMap<&str, usize> = steps
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let edges: Vec<(i64, i64, i64, i64)> = steps
        .iter()
        .enumerate()
        .flat_map(|(i, step)| {
            let index = &index;
            let places = &places;
            step.depends_on.iter().filter_map(move |dep| {
                let j = *index.get(dep.as_str())?;
                let (x1, y1) = origin(places[j]);
                let (x2, y2) = origin(places[i]);
                Some((x1 + WIDTH, y1 + HEIGHT / 2, x2, y2 + HEIGHT / 2))
            })
        })
        .collect();
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
                @for (x1, y1, x2, y2) in &edges {
                    @let bend = (x2 - x1) / 2;
                    path.edge marker-end="url(#arrow)"
                        d={"M" (x1) "," (y1) " C" (x1 + bend) "," (y1) " " (x2 - bend) "," (y2) " " (x2) "," (y2)} {}
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

    #[test]
    fn a_long_id_is_cut_in_its_box_and_whole_in_its_title() {
        let long = "a-step-whose-id-goes-on-and-on";
        let svg = plan_graph(&[step(long, &[])], |_| "waiting").into_string();
        assert!(svg.contains("a-step-whose-id-goe…"));
        assert!(svg.contains(&format!("<title>{long} — waiting</title>")));
    }
}
