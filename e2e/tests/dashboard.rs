//! The Grafana dashboard (`docs/grafana/wincsi-dashboard.json`, the same file as the chart's
//! `charts/wincsi/dashboards/wincsi.json`):
//!
//! - it is a Grafana dashboard: the fields Grafana's dashboard schema requires, with their types and ranges
//!   (grafana/grafana `kinds/dashboard/dashboard_kind.cue`, the classic model: `title`, `uid` of 8–40 characters,
//!   `schemaVersion`, `graphTooltip` 0–2, `templating.list` variables with a known `type`, `annotations.list`,
//!   panels with a non-empty `type`, a unique `id`, a `gridPos` inside the 24-column grid, `fieldConfig.defaults`
//!   and `.overrides`, `options`, `transformations`, targets with unique `refId`s), panels that do not overlap and
//!   every data source reference naming the dashboard's own data source variable;
//! - every query names only metrics the real `wincsi-node` binary exports, and only labels those metrics carry (or
//!   the target labels Prometheus adds), checked against a scrape taken after kubelet staged, published and
//!   unstaged an SMB and an iSCSI volume.
#![cfg(unix)]

mod metrics_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use metrics_support::{get, http_listeners};
use serde_json::Value as Json;
use wincsi_e2e::fixtures::{self, SECRETS};
use wincsi_e2e::{Pod, TestNode, binaries};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("repo")
        .to_path_buf()
}

fn dashboard_text() -> String {
    std::fs::read_to_string(repo().join("docs/grafana/wincsi-dashboard.json")).expect("dashboard")
}

fn dashboard() -> Json {
    serde_json::from_str(&dashboard_text()).expect("the dashboard is JSON")
}

/// Every panel, rows' nested panels included.
fn panels(d: &Json) -> Vec<&Json> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        out.push(p);
        out.extend(p["panels"].as_array().into_iter().flatten());
    }
    out
}

/// Every PromQL expression: the panels' targets and the query variables.
fn queries(d: &Json) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in panels(d) {
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                format!("panel {:?}", p["title"]),
                t["expr"].as_str().expect("expr").to_owned(),
            ));
        }
    }
    for v in d["templating"]["list"].as_array().expect("templating") {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().or(v["query"].as_str());
            out.push((
                format!("variable {}", v["name"]),
                q.expect("query").to_owned(),
            ));
        }
    }
    out
}

#[test]
fn the_docs_and_the_chart_ship_the_same_dashboard() {
    let chart = std::fs::read_to_string(repo().join("charts/wincsi/dashboards/wincsi.json"))
        .expect("chart copy");
    assert_eq!(
        chart,
        dashboard_text(),
        "docs/grafana/wincsi-dashboard.json and charts/wincsi/dashboards/wincsi.json differ"
    );
}

#[test]
fn the_dashboard_is_valid_grafana_dashboard_json() {
    let d = dashboard();
    let s = |v: &Json, what: &str| -> String {
        v.as_str()
            .unwrap_or_else(|| panic!("{what} must be a string: {v}"))
            .to_owned()
    };
    assert!(!s(&d["title"], "title").is_empty());
    let uid = s(&d["uid"], "uid");
    assert!(
        (8..=40).contains(&uid.len())
            && uid
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c)),
        "uid {uid:?}: 8 to 40 characters"
    );
    let schema = d["schemaVersion"]
        .as_u64()
        .expect("schemaVersion: an integer");
    assert!(
        (36..=u64::from(u16::MAX)).contains(&schema),
        "schemaVersion {schema}"
    );
    assert!(d["editable"].is_boolean());
    assert!(matches!(d["graphTooltip"].as_u64(), Some(0..=2)));
    s(&d["time"]["from"], "time.from");
    s(&d["time"]["to"], "time.to");
    assert!(
        d["tags"]
            .as_array()
            .expect("tags")
            .iter()
            .all(Json::is_string)
    );
    for a in d["annotations"]["list"]
        .as_array()
        .expect("annotations.list")
    {
        s(&a["name"], "annotation name");
        s(&a["iconColor"], "annotation iconColor");
        assert!(
            a["enable"].is_boolean() && a["datasource"].is_object(),
            "{a}"
        );
    }
    // Variables: a known type, unique names, the data source variable of type prometheus.
    let mut names = BTreeSet::new();
    let mut datasource_vars = BTreeSet::new();
    for v in d["templating"]["list"].as_array().expect("templating.list") {
        let ty = s(&v["type"], "variable type");
        assert!(
            [
                "query",
                "adhoc",
                "constant",
                "datasource",
                "interval",
                "textbox",
                "custom",
                "system"
            ]
            .contains(&ty.as_str()),
            "variable type {ty}"
        );
        let name = s(&v["name"], "variable name");
        assert!(names.insert(name.clone()), "variable {name} twice");
        assert!(matches!(v["hide"].as_u64(), Some(0..=2)), "{name}: hide");
        match ty.as_str() {
            "datasource" => {
                assert_eq!(v["query"], "prometheus", "{name}");
                datasource_vars.insert(format!("${{{name}}}"));
            }
            "query" => assert!(v["datasource"].is_object(), "{name}: datasource"),
            _ => {}
        }
    }
    assert_eq!(datasource_vars.len(), 1, "one data source variable");
    let ds_ok = |ds: &Json| {
        ds["type"] == "prometheus"
            && ds["uid"]
                .as_str()
                .is_some_and(|u| datasource_vars.contains(u))
    };
    // Panels: the schema's fields, unique ids, in the grid, no overlap.
    let known = [
        "timeseries",
        "stat",
        "table",
        "gauge",
        "bargauge",
        "text",
        "heatmap",
        "row",
    ];
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let all = panels(&d);
    assert!(all.len() >= 10, "{} panels", all.len());
    for p in all {
        let title = s(&p["title"], "panel title");
        let ty = s(&p["type"], "panel type");
        assert!(known.contains(&ty.as_str()), "{title}: type {ty}");
        let id = p["id"].as_u64().expect("panel id: an unsigned integer");
        assert!(ids.insert(id), "{title}: id {id} twice");
        let g = &p["gridPos"];
        let (x, y, w, h) = (
            g["x"].as_u64().expect("x"),
            g["y"].as_u64().expect("y"),
            g["w"].as_u64().expect("w"),
            g["h"].as_u64().expect("h"),
        );
        assert!(
            h > 0 && (1..=24).contains(&w) && x < 24 && x + w <= 24,
            "{title}: gridPos {g}"
        );
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.clone()) {
                    panic!("{title} overlaps {other} at ({cx}, {cy})");
                }
            }
        }
        if ty == "row" {
            assert!(
                p["collapsed"].is_boolean() && p["panels"].is_array(),
                "{title}"
            );
            continue;
        }
        assert!(
            ds_ok(&p["datasource"]),
            "{title}: datasource {}",
            p["datasource"]
        );
        assert!(
            p["fieldConfig"]["defaults"].is_object(),
            "{title}: fieldConfig.defaults"
        );
        assert!(
            p["fieldConfig"]["overrides"].is_array(),
            "{title}: fieldConfig.overrides"
        );
        assert!(p["options"].is_object(), "{title}: options");
        assert!(p["transformations"].is_array(), "{title}: transformations");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no query");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(refs.insert(s(&t["refId"], "refId")), "{title}: refId twice");
            assert!(ds_ok(&t["datasource"]), "{title}: target datasource");
            assert!(
                !s(&t["expr"], "expr").trim().is_empty(),
                "{title}: empty expr"
            );
        }
    }
}

/// The metric names a PromQL expression uses (identifiers starting `wincsi_`).
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b':';
        if ident(b[i]) && (i == 0 || !ident(b[i - 1])) {
            let start = i;
            while i < b.len() && ident(b[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            if word.starts_with("wincsi_") {
                out.push(word.to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The label names an expression uses with metric `name`: its matchers `name{l=...}` and every `by (...)`
/// grouping of the expression.
fn label_names(expr: &str, name: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find(&format!("{name}{{")) {
        let inner = &rest[at + name.len() + 1..];
        let (matchers, after) = inner.split_once('}').expect("closed matcher");
        for m in matchers.split(',') {
            let label = m.split(['=', '!']).next().unwrap_or("").trim();
            if !label.is_empty() {
                out.insert(label.to_owned());
            }
        }
        rest = after;
    }
    let mut rest = expr;
    while let Some(at) = rest.find("by (") {
        let (labels, after) = rest[at + 4..].split_once(')').expect("closed by");
        out.extend(labels.split(',').map(|l| l.trim().to_owned()));
        rest = after;
    }
    out
}

/// Sample name → the label names its samples carry, from a Prometheus text exposition.
fn scraped(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, _value) = line.rsplit_once(' ').expect("a sample");
        let (name, labels) = series.split_once('{').unwrap_or((series, "}"));
        let entry = out.entry(name.to_owned()).or_default();
        for pair in labels.trim_end_matches('}').split("\",") {
            if let Some((k, _)) = pair.split_once('=') {
                entry.insert(k.trim_start_matches(',').to_owned());
            }
        }
    }
    out
}

#[test]
fn the_query_readers_are_not_vacuous() {
    let e = r#"histogram_quantile(0.99, sum by (le, method) (rate(wincsi_csi_request_duration_seconds_bucket{instance=~"$instance",grpc_code!="OK"}[5m]))) or vector(0)"#;
    assert_eq!(
        metric_names(e),
        ["wincsi_csi_request_duration_seconds_bucket"]
    );
    assert_eq!(
        label_names(e, "wincsi_csi_request_duration_seconds_bucket"),
        ["grpc_code", "instance", "le", "method"]
            .map(String::from)
            .into()
    );
    let s = scraped("# HELP x y\nwincsi_a_total{method=\"A\",grpc_code=\"OK\"} 1\nwincsi_b 2\n");
    assert_eq!(
        s["wincsi_a_total"],
        ["grpc_code", "method"].map(String::from).into()
    );
    assert!(s["wincsi_b"].is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_names_a_metric_and_labels_the_driver_exports() {
    let node = TestNode::start_with(&binaries!(), &fixtures::scenario(), |o| {
        o.extra_args
            .extend(["--metrics-address", "127.0.0.1:0"].map(String::from));
    })
    .await
    .expect("node starts");
    let metrics = http_listeners(&node.driver_logs())["/metrics"];
    let (k, host) = (node.kubelet(), node.host());
    let pod = Pod::new("team-a", "app-0");
    let smb = fixtures::smb_volume("pv-smb", "team-a", "data", None);
    let lun = fixtures::iscsi_volume("pv-lun0", "team-a", "db", 0);
    for v in [&smb, &lun] {
        k.mount(host, &pod, v).await.expect("mount");
    }
    // A refused call, so the error series exist too.
    let refused = node
        .csi()
        .node()
        .node_stage_volume(csi::v1::NodeStageVolumeRequest::default())
        .await;
    assert!(refused.is_err());
    let (status, text) = get(metrics, "/metrics").await;
    assert_eq!(status, 200);
    for v in [&smb, &lun] {
        k.unmount(host, &pod, v).await.expect("unmount");
    }
    let exported = scraped(&text);
    // Labels Prometheus adds to every series of a target (pod or annotation discovery).
    let target_labels = [
        "instance",
        "job",
        "namespace",
        "pod",
        "container",
        "endpoint",
    ];
    let d = dashboard();
    let mut checked = BTreeSet::new();
    for (where_, expr) in queries(&d) {
        let names = metric_names(&expr);
        assert!(!names.is_empty(), "{where_}: {expr} names no wincsi metric");
        for name in names {
            let labels = exported.get(&name).unwrap_or_else(|| {
                panic!("{where_}: {name} is not exported by the driver\n{text}")
            });
            for l in label_names(&expr, &name) {
                assert!(
                    labels.contains(&l) || target_labels.contains(&l.as_str()),
                    "{where_}: {name} has no label {l} (it has {labels:?})"
                );
            }
            checked.insert(name);
        }
    }
    // The dashboard covers what the issue asks for.
    for family in [
        "wincsi_csi_requests_total",
        "wincsi_csi_request_duration_seconds_bucket",
        "wincsi_host_call_duration_seconds_bucket",
        "wincsi_host_calls_total",
        "wincsi_volumes_staged",
        "wincsi_volumes_published",
        "wincsi_state_record_problems",
        "wincsi_host_backend_up",
    ] {
        assert!(checked.contains(family), "no panel shows {family}");
    }
    for secret in SECRETS {
        assert!(!text.contains(secret));
    }
    node.check_clean().await.expect("clean");
    node.shutdown().await;
}
