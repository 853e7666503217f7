#!/usr/bin/env python3
"""Writes the Grafana dashboards deploy/grafana/{overview,caches,moe}.json.

The JSON files are committed (import them in Grafana: Dashboards > New > Import, or provision
them); this script is their source. deploy/test/dashboards_test.py fails when a committed file
differs from what this script writes, so edit here and rerun:

    python3 deploy/grafana/generate_dashboards.py            # rewrite the files
    python3 deploy/grafana/generate_dashboards.py --check    # exit 1 if a file is stale

Every query uses metrics that Strata exports (server/metrics.h); the test checks each name and
label against a real /metrics exposition and runs every query on a Prometheus server.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# Series selector shared by every query: the dashboard's model and rank variables.
SEL = 'model_name=~"$model_name", rank=~"$rank"'
RATE = "$__rate_interval"


def target(expr, legend, ref="A", fmt=None):
    t = {"datasource": {"type": "prometheus", "uid": "${datasource}"}, "expr": expr,
         "legendFormat": legend, "refId": ref, "range": True}
    if fmt:
        t["format"] = fmt
    return t


def panel(kind, title, targets, x, y, w, h, unit="short", description="", **extra):
    p = {"type": kind, "title": title, "description": description,
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "gridPos": {"x": x, "y": y, "w": w, "h": h},
         "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
         "targets": [dict(t, refId=chr(ord("A") + i)) for i, t in enumerate(targets)]}
    if kind == "timeseries":
        p["options"] = {"legend": {"displayMode": "table", "placement": "bottom",
                                   "calcs": ["mean", "max", "lastNotNull"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}
    p.update(extra)
    return p


def quantiles(metric, by="le", qs=(0.5, 0.9, 0.99)):
    """histogram_quantile targets for a strata histogram (seconds)."""
    return [target(f'histogram_quantile({q}, sum by ({by}) (rate({metric}_bucket{{{SEL}}}[{RATE}])))',
                   f"p{int(q * 100)}" + (" rank {{rank}}" if "rank" in by else "")) for q in qs]


def mean_of(metric, legend="mean"):
    return target(f"sum(rate({metric}_sum{{{SEL}}}[{RATE}])) / "
                  f"sum(rate({metric}_count{{{SEL}}}[{RATE}]))", legend)


def row(title, y):
    return {"type": "row", "title": title, "collapsed": False,
            "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []}


def dashboard(uid, title, description, panels):
    for i, p in enumerate(panels, start=1):
        p["id"] = i
    variables = [
        {"type": "datasource", "name": "datasource", "label": "Data source", "query": "prometheus",
         "current": {}, "hide": 0, "refresh": 1},
        {"type": "query", "name": "model_name", "label": "Model",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": "label_values(strata:num_requests_running, model_name)",
                   "refId": "model_name"},
         "definition": "label_values(strata:num_requests_running, model_name)",
         "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "refresh": 2,
         "sort": 1},
        {"type": "query", "name": "rank", "label": "Rank",
         "datasource": {"type": "prometheus", "uid": "${datasource}"},
         "query": {"query": 'label_values(strata:num_requests_running{model_name=~"$model_name"}, rank)',
                   "refId": "rank"},
         "definition": 'label_values(strata:num_requests_running{model_name=~"$model_name"}, rank)',
         "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "refresh": 2,
         "sort": 3},
    ]
    return {"uid": uid, "title": title, "description": description, "tags": ["strata", "llm"],
            "editable": True, "graphTooltip": 1, "schemaVersion": 39, "version": 1,
            "timezone": "", "refresh": "30s", "time": {"from": "now-1h", "to": "now"},
            "templating": {"list": variables}, "annotations": {"list": []},
            "links": [{"type": "dashboards", "tags": ["strata"], "asDropdown": True,
                       "title": "Strata dashboards"}],
            "panels": panels}


def of_served(series):
    """A per-process series without model_name, kept for the processes serving the selected
    models and ranks."""
    return f"{series} and on (instance) strata:num_requests_running{{{SEL}}}"


def overview():
    s = SEL
    return dashboard("strata-overview", "Strata / Overview",
                     "Requests, latency percentiles, throughput and queue of Strata servers.", [
        row("Now", 0),
        panel("stat", "Running requests", [target(f"sum(strata:num_requests_running{{{s}}})", "running")],
              0, 1, 4, 4),
        panel("stat", "Waiting requests", [target(f"sum(strata:num_requests_waiting{{{s}}})", "waiting")],
              4, 1, 4, 4),
        panel("stat", "Finished requests / s",
              [target(f"sum(rate(strata:request_success_total{{{s}}}[{RATE}]))", "req/s")],
              8, 1, 4, 4, unit="reqps"),
        panel("stat", "Generation tokens / s",
              [target(f"sum(rate(strata:generation_tokens_total{{{s}}}[{RATE}]))", "tok/s")],
              12, 1, 4, 4),
        panel("stat", "TTFT p99",
              [target(f"histogram_quantile(0.99, sum by (le) (rate(strata:time_to_first_token_seconds_bucket{{{s}}}[{RATE}])))", "p99")],
              16, 1, 4, 4, unit="s"),
        panel("stat", "KV cache usage (max rank)",
              [target(f"max(strata:kv_cache_usage_perc{{{s}}})", "max")],
              20, 1, 4, 4, unit="percentunit"),
        row("Requests", 5),
        panel("timeseries", "Finished requests by reason",
              [target(f"sum by (finished_reason) (rate(strata:request_success_total{{{s}}}[{RATE}]))",
                      "{{finished_reason}}")], 0, 6, 8, 8, unit="reqps"),
        panel("timeseries", "Queue: running and waiting per rank",
              [target(f"sum by (rank) (strata:num_requests_running{{{s}}})", "running rank {{rank}}"),
               target(f"sum by (rank) (strata:num_requests_waiting{{{s}}})", "waiting rank {{rank}}")],
              8, 6, 8, 8),
        panel("timeseries", "HTTP requests by route and status",
              [target(f"sum by (handler, status) (rate(http_requests_total[{RATE}]) "
                      f"and on (instance) strata:num_requests_running{{{s}}})",
                      "{{handler}} {{status}}")], 16, 6, 8, 8, unit="reqps",
              description="Every HTTP exchange, also those refused before the engine (400, "
                          "401, 404, 429) and clients gone before a response (499, as 4xx)."),
        row("Latency", 14),
        panel("timeseries", "Time to first token", quantiles("strata:time_to_first_token_seconds")
              + [mean_of("strata:time_to_first_token_seconds")], 0, 15, 12, 8, unit="s"),
        panel("timeseries", "Inter-token latency", quantiles("strata:inter_token_latency_seconds")
              + [mean_of("strata:inter_token_latency_seconds")], 12, 15, 12, 8, unit="s"),
        panel("timeseries", "End-to-end request latency",
              quantiles("strata:e2e_request_latency_seconds"), 0, 23, 12, 8, unit="s"),
        panel("timeseries", "Queue time", quantiles("strata:request_queue_time_seconds"),
              12, 23, 12, 8, unit="s"),
        panel("timeseries", "Prefill time", quantiles("strata:request_prefill_time_seconds"),
              0, 31, 12, 8, unit="s"),
        panel("timeseries", "Decode time", quantiles("strata:request_decode_time_seconds"),
              12, 31, 12, 8, unit="s"),
        panel("heatmap", "Time to first token distribution",
              [target(f"sum by (le) (increase(strata:time_to_first_token_seconds_bucket{{{s}}}[{RATE}]))",
                      "{{le}}", fmt="heatmap")], 0, 39, 24, 8, unit="s",
              options={"calculate": False, "yAxis": {"unit": "s"},
                       "cellGap": 1, "color": {"scheme": "Oranges", "mode": "scheme"}}),
        row("Throughput", 47),
        panel("timeseries", "Token throughput",
              [target(f"sum(rate(strata:prompt_tokens_total{{{s}}}[{RATE}]))", "prompt tokens/s"),
               target(f"sum(rate(strata:generation_tokens_total{{{s}}}[{RATE}]))", "generation tokens/s"),
               target(f"sum(rate(strata:iteration_tokens_total{{{s}}}[{RATE}]))", "all tokens run/s")],
              0, 48, 12, 8),
        panel("timeseries", "Engine steps",
              [target(f"sum by (rank) (rate(strata:step_duration_seconds_count{{{s}}}[{RATE}]))", "steps/s rank {{rank}}"),
               target(f"sum by (rank) (rate(strata:iteration_tokens_sum{{{s}}}[{RATE}])) / "
                      f"sum by (rank) (rate(strata:iteration_tokens_count{{{s}}}[{RATE}]))",
                      "tokens/step rank {{rank}}")],
              12, 48, 12, 8),
        panel("timeseries", "Step duration", quantiles("strata:step_duration_seconds", by="le, rank",
                                                       qs=(0.5, 0.99)), 0, 56, 12, 8, unit="s"),
        panel("timeseries", "Request lengths (p50, p99)",
              [target(f"histogram_quantile({q}, sum by (le) (rate(strata:request_{kind}_tokens_bucket{{{s}}}[{RATE}])))",
                      f"{kind} p{int(q * 100)}") for kind in ("prompt", "generation") for q in (0.5, 0.99)],
              12, 56, 12, 8),
        row("Speculative decoding (--speculative-config)", 64),
        panel("timeseries", "Draft acceptance rate",
              [target(f"sum by (rank) (rate(strata:spec_decode_num_accepted_tokens_total{{{s}}}[{RATE}])) / "
                      f"sum by (rank) (rate(strata:spec_decode_num_draft_tokens_total{{{s}}}[{RATE}]))",
                      "rank {{rank}}")],
              0, 65, 12, 8, unit="percentunit",
              description="Draft tokens accepted / proposed (prompt lookup)."),
        panel("timeseries", "Tokens per verifying step",
              [target(f"1 + sum(rate(strata:spec_decode_num_accepted_tokens_total{{{s}}}[{RATE}])) / "
                      f"sum(rate(strata:spec_decode_num_drafts_total{{{s}}}[{RATE}]))",
                      "mean accepted length"),
               target(f"sum(rate(strata:spec_decode_num_drafts_total{{{s}}}[{RATE}]))", "drafts/s")],
              12, 65, 12, 8,
              description="1 + accepted drafts per sequence step that verified drafts, and how "
                          "often sequences draft (adaptive: rejected drafts pause drafting)."),
        row("HTTP (per server process)", 73),
        panel("timeseries", "HTTP request duration p99 by route",
              [target(f"histogram_quantile(0.99, sum by (handler, le) "
                      f"({of_served(f'rate(http_request_duration_seconds_bucket[{RATE}])')}))",
                      "{{handler}}")],
              0, 74, 12, 8, unit="s",
              description="Request read to response written; for streams, the whole stream."),
        panel("timeseries", "HTTP response bytes / s by route",
              [target(f"sum by (handler) ({of_served(f'rate(http_response_size_bytes_total[{RATE}])')})",
                      "{{handler}}")],
              12, 74, 12, 8, unit="Bps"),
        panel("timeseries", "HTTP connections",
              [target(f"sum by (instance) ({of_served('strata:http_connections')})",
                      "open {{instance}}"),
               target(f"sum by (instance) ({of_served('strata:http_max_connections')})",
                      "limit {{instance}}", ref="B")],
              0, 82, 12, 8,
              description="Open HTTP connections against --max-connections (default: the "
                          "descriptor limit less a reserve); past it new ones get a 503."),
        panel("timeseries", "Connections refused and accept errors / s",
              [target(f"sum({of_served(f'rate(strata:http_connections_refused_total[{RATE}])')})",
                      "refused (over --max-connections)"),
               target(f"sum({of_served(f'rate(strata:http_accept_errors_total[{RATE}])')})",
                      "accept errors (e.g. out of descriptors)", ref="B")],
              12, 82, 12, 8,
              description="Connections answered 503 past the connection limit, and failed "
                          "accepts (the accept loop backs off and logs at most once a second)."),
        row("Batches and stored responses (per server process)", 90),
        panel("timeseries", "Batch backlog",
              [target(f"sum({of_served('strata:batch_requests_pending')})", "requests pending"),
               target("sum by (status) ("
                      + of_served('strata:batches{status=~"validating|in_progress|finalizing|cancelling"}')
                      + ")", "batches {{status}}", ref="B")],
              0, 91, 12, 8,
              description="Requests of unfinished /v1/batches not answered yet, and those batches by "
                          "status. A backlog that does not fall means batch traffic outpaces what "
                          "--batch-max-concurrent-requests leaves it."),
        panel("timeseries", "Stored responses",
              [target(f"sum({of_served('strata:stored_responses_bytes')}) / "
                      f"sum({of_served('strata:stored_responses_capacity_bytes')})", "store used"),
               target(f"sum({of_served('strata:files_bytes')}) / "
                      f"sum({of_served('strata:files_capacity_bytes')})", "files used", ref="B")],
              12, 91, 6, 8, unit="percentunit",
              description="Stored /v1/responses against --responses-store-memory (the least recently "
                          "used go past it) and /v1/files against --files-store-memory (uploads past "
                          "it are refused)."),
        panel("timeseries", "Responses kept and running in background",
              [target(f"sum({of_served('strata:stored_responses')})", "stored"),
               target(f"sum({of_served('strata:background_responses_running')})",
                      "background running", ref="B")],
              18, 91, 6, 8,
              description="Stored /v1/responses (GET, previous_response_id), and those with "
                          "background: true queued or generating."),
        row("Vision encoder (per server process)", 99),
        panel("timeseries", "Images waiting and encoding",
              [target(f"sum({of_served('strata:encoder_queue_images')})", "waiting"),
               target(f"sum({of_served('strata:encoder_running_images')})", "encoding",
                      ref="B")],
              0, 100, 8, 8,
              description="Images queued for the vision encoder thread (one image at a time, "
                          "in arrival order) and the one it is encoding. A queue that does not "
                          "drain means images arrive faster than the tower encodes them: their "
                          "requests wait before prefill (time to first token)."),
        panel("timeseries", "Images encoded / s and mean encode time",
              [target(f"sum({of_served(f'rate(strata:images_encoded_total[{RATE}])')})",
                      "images / s"),
               target(f"sum({of_served(f'rate(strata:image_encode_seconds_total[{RATE}])')}) / "
                      f"sum({of_served(f'rate(strata:images_encoded_total[{RATE}])')})",
                      "mean seconds per image", ref="B")],
              8, 100, 8, 8,
              description="Tower runs per second and the mean time of one (it grows with the "
                          "image's patches, quadratically in attention)."),
        panel("timeseries", "Encoder cache",
              [target(f"sum({of_served(f'rate(strata:encoder_cache_hits_total[{RATE}])')}) / "
                      f"(sum({of_served(f'rate(strata:encoder_cache_hits_total[{RATE}])')}) + "
                      f"sum({of_served(f'rate(strata:images_encoded_total[{RATE}])')}))",
                      "hit ratio"),
               target(f"sum({of_served('strata:encoder_cache_bytes')}) / "
                      f"sum({of_served('strata:encoder_cache_capacity_bytes')})", "used",
                      ref="B")],
              16, 100, 8, 8, unit="percentunit",
              description="Images served from the cache of the tower's rows (n > 1, retries, "
                          "the same image again), and the cache's use of its capacity."),
    ])


def offload_tiers(y):
    """The caches dashboard's row on the KV offload tiers (--kv-offload-memory: tier "host";
    --kv-offload-dir: tier "disk"). Their series are per process (no model_name, rank) and
    absent while a tier is off, so the panels are empty on servers without tiers."""
    def by_tier(series, agg="sum by (tier)"):
        return f"{agg} ({of_served(series)})"

    def rate_by_tier(counter, agg="sum by (tier)"):
        return by_tier(f"rate({counter}[{RATE}])", agg)

    hits, misses = "strata:kv_offload_hits_total", "strata:kv_offload_misses_total"
    load_buckets = rate_by_tier("strata:kv_offload_load_seconds_bucket", "sum by (tier, le)")
    return [
        row("KV offload tiers (--kv-offload-memory, --kv-offload-dir; per server process)", y),
        panel("timeseries", "Offload tier bytes: used and capacity",
              [target(by_tier("strata:kv_offload_bytes"), "{{tier}} used"),
               target(by_tier("strata:kv_offload_capacity_bytes"), "{{tier}} capacity", ref="B")],
              0, y + 1, 12, 8, unit="bytes",
              description="Bytes each tier holds (disk: entry files, queued writes included) "
                          "against --kv-offload-memory and --kv-offload-disk. Both tiers evict "
                          "least recently used entries at their budget, so a full tier is "
                          "normal: it churns rather than refuses."),
        panel("timeseries", "Offload tier hit ratio",
              [target(f"{rate_by_tier(hits)} / ({rate_by_tier(hits)} + {rate_by_tier(misses)})",
                      "{{tier}}")],
              12, y + 1, 6, 8, unit="percentunit",
              fieldConfig={"defaults": {"unit": "percentunit", "min": 0, "max": 1},
                           "overrides": []},
              description="Loads that returned bytes over all loads, per tier. A miss is an "
                          "entry gone between lookup and load, or a bad file (disk)."),
        panel("timeseries", "Offload tier entries",
              [target(by_tier("strata:kv_offload_entries"), "{{tier}}")],
              18, y + 1, 6, 8,
              description="Latent blocks and KDA checkpoints each tier holds."),
        panel("timeseries", "Offload tier loads / s",
              [target(rate_by_tier(hits), "{{tier}} hits"),
               target(rate_by_tier(misses), "{{tier}} misses", ref="B")],
              0, y + 9, 12, 8, unit="ops",
              description="Entries loaded back into the device cache (hits) and loads that "
                          "found nothing usable (misses), per tier."),
        panel("timeseries", "Offload tier traffic",
              [target(rate_by_tier("strata:kv_offload_stored_bytes_total"), "{{tier}} stored"),
               target(rate_by_tier("strata:kv_offload_loaded_bytes_total"), "{{tier}} loaded",
                      ref="B")],
              12, y + 9, 12, 8, unit="Bps",
              description="Bytes written into each tier (what the device cache, or the host "
                          "tier above, evicts) and read back out of it on prefix hits."),
        panel("timeseries", "Offload tier load latency",
              [target(f"histogram_quantile({q}, {load_buckets})", f"{{{{tier}}}} p{int(q * 100)}")
               for q in (0.5, 0.99)],
              0, y + 17, 12, 8, unit="s",
              description="Time to load one entry: a memory copy (host) or a file read and "
                          "checksum (disk, on the read-ahead threads)."),
        panel("timeseries", "Prompt tokens served from offload tiers",
              [target(f"sum({of_served(f'rate(strata:kv_offload_hit_tokens_total[{RATE}])')})",
                      "prefix hits through a tier"),
               target(f"sum(rate(strata:prompt_tokens_total{{{SEL}}}[{RATE}]))",
                      "all prompt tokens", ref="B")],
              12, y + 17, 12, 8,
              description="Prompt tokens of prefix hits that went on in a tier (the device "
                          "cache's part of those hits included), against all prompt tokens: "
                          "what the tiers saved from being computed again."),
        panel("timeseries", "Offload tier failures / s",
              [target(rate_by_tier("strata:kv_offload_write_failures_total"),
                      "{{tier}} write failures"),
               target(rate_by_tier("strata:kv_offload_dropped_total"), "{{tier}} dropped", ref="B"),
               target(rate_by_tier("strata:kv_offload_corrupt_entries_total"),
                      "{{tier}} corrupt entries", ref="C"),
               target(f"sum({of_served(f'rate(strata:kv_offload_load_failures_total[{RATE}])')})",
                      "load failures", ref="D")],
              0, y + 25, 12, 8, unit="ops",
              description="Disk writes that failed (disk full, I/O errors: the entry is lost), "
                          "entries a tier did not keep (host evictions with no disk tier below, "
                          "entries bigger than the tier, disk writes refused when the writer "
                          "queue is full), bad files skipped "
                          "and removed, and tier hits dropped because a read failed (the prefix "
                          "is computed instead)."),
        panel("timeseries", "Offload tier evictions / s",
              [target(rate_by_tier("strata:kv_offload_evictions_total"), "{{tier}}")],
              12, y + 25, 12, 8, unit="ops",
              description="Entries pushed out (least recently used) to make room. Host "
                          "evictions go down to the disk tier when there is one."),
    ]


def caches():
    s = SEL
    return dashboard("strata-caches", "Strata / Caches",
                     "MLA latent pages, KDA state slots, prefix cache, checkpoint evictions, "
                     "preemptions and the KV offload tiers.", [
        row("Capacity", 0),
        panel("timeseries", "MLA latent cache usage per rank",
              [target(f"strata:kv_cache_usage_perc{{{s}}}", "rank {{rank}}")], 0, 1, 12, 8,
              unit="percentunit", fieldConfig={"defaults": {"unit": "percentunit", "min": 0, "max": 1},
                                               "overrides": []}),
        panel("timeseries", "KDA state slot usage per rank",
              [target(f"strata:state_slot_usage_perc{{{s}}}", "rank {{rank}}")], 12, 1, 12, 8,
              unit="percentunit", fieldConfig={"defaults": {"unit": "percentunit", "min": 0, "max": 1},
                                               "overrides": []}),
        panel("gauge", "MLA latent cache usage (max rank)",
              [target(f"max(strata:kv_cache_usage_perc{{{s}}})", "max")], 0, 9, 6, 6,
              unit="percentunit"),
        panel("gauge", "KDA state slot usage (max rank)",
              [target(f"max(strata:state_slot_usage_perc{{{s}}})", "max")], 6, 9, 6, 6,
              unit="percentunit"),
        panel("stat", "Prefix cache hit rate",
              [target(f"sum(rate(strata:prefix_cache_hits_total{{{s}}}[{RATE}])) / "
                      f"sum(rate(strata:prefix_cache_queries_total{{{s}}}[{RATE}]))", "hit rate")],
              12, 9, 6, 6, unit="percentunit"),
        panel("stat", "Preemptions / min",
              [target(f"sum(rate(strata:num_preemptions_total{{{s}}}[{RATE}])) * 60", "per min")],
              18, 9, 6, 6),
        row("Prefix cache", 15),
        panel("timeseries", "Prefix cache hit rate per rank (tokens)",
              [target(f"sum by (rank) (rate(strata:prefix_cache_hits_total{{{s}}}[{RATE}])) / "
                      f"sum by (rank) (rate(strata:prefix_cache_queries_total{{{s}}}[{RATE}]))",
                      "rank {{rank}}")], 0, 16, 12, 8, unit="percentunit"),
        panel("timeseries", "Prefix cache tokens / s",
              [target(f"sum(rate(strata:prefix_cache_queries_total{{{s}}}[{RATE}]))", "queried"),
               target(f"sum(rate(strata:prefix_cache_hits_total{{{s}}}[{RATE}]))", "hit")],
              12, 16, 12, 8),
        panel("timeseries", "KDA checkpoints held",
              [target(f"sum by (rank) (strata:kda_checkpoints{{{s}}})", "rank {{rank}}"),
               target(f"sum by (rank) (strata:kda_checkpoints_in_state_slots{{{s}}})",
                      "rank {{rank}} in idle state slots")],
              0, 24, 12, 8,
              description="Checkpoints in idle state slots go first when admissions need "
                          "slots: if most are there, hits will drop under load."),
        panel("timeseries", "KDA checkpoint memory",
              [target(f"sum by (rank) (strata:kda_checkpoint_bytes{{{s}}})", "rank {{rank}}")],
              12, 24, 12, 8, unit="bytes"),
        row("Pressure", 32),
        panel("timeseries", "Preemptions per rank",
              [target(f"sum by (rank) (rate(strata:num_preemptions_total{{{s}}}[{RATE}]))", "rank {{rank}}")],
              0, 33, 12, 8, unit="ops"),
        panel("timeseries", "Waiting requests vs cache usage",
              [target(f"sum(strata:num_requests_waiting{{{s}}})", "waiting"),
               target(f"max(strata:kv_cache_usage_perc{{{s}}}) * 100", "max latent usage %"),
               target(f"max(strata:state_slot_usage_perc{{{s}}}) * 100", "max slot usage %")],
              12, 33, 12, 8),
        panel("timeseries", "KDA checkpoint evictions per rank",
              [target(f"sum by (rank) (rate(strata:kda_checkpoint_evictions_total{{{s}}}[{RATE}]))",
                      "rank {{rank}}")],
              0, 41, 12, 8, unit="ops",
              description="Checkpoints evicted (least recently used) to make room for new ones. "
                          "A steady rate under load means the checkpoint budget (10 % of the cache "
                          "memory) holds too few for the conversations in flight, and prefix "
                          "hits on KDA models miss."),
        panel("timeseries", "Prompt tokens per step while decoding",
              [target(f"max by (rank) (strata:prefill_chunk_limit_tokens{{{s}}})", "rank {{rank}}")],
              12, 41, 12, 8,
              description="The cap --target-itl-ms puts on a step's prompt tokens while others "
                          "decode, sized to the measured prefill rate (0: no cap). A small cap "
                          "with long prompts queued means slow prefill: their time to first token "
                          "grows so that streams keep their pace."),
        panel("timeseries", "Prefill progress of running requests",
              [target(f"sum by (rank) (strata:prefill_tokens_processed{{{s}}})",
                      "processed rank {{rank}}"),
               target(f"sum by (rank) (strata:prefill_tokens_remaining{{{s}}})",
                      "remaining rank {{rank}}", ref="B")],
              0, 49, 24, 8,
              description="Prompt tokens of the requests still prefilling: done (cached ones "
                          "included) and left. A long prompt (a whole code base, a book) shows as "
                          "a slow climb; remaining tokens over prefill tokens/s is its time to "
                          "first token."),
    ] + offload_tiers(57) + [
        row("Configuration", 90),
        panel("table", "Cache configuration per rank",
              [target(f"strata:cache_config_info{{{s}}}", "", fmt="table")], 0, 91, 24, 6,
              description="--kv-cache-dtype, --block-size and the memory plan's pools "
                          "(strata:cache_config_info labels).",
              options={"showHeader": True},
              transformations=[{"id": "labelsToFields", "options": {"mode": "columns"}},
                               {"id": "organize", "options": {"excludeByName": {
                                   "Time": True, "Value": True, "__name__": True}}}]),
    ])


def moe():
    s = SEL
    return dashboard("strata-moe", "Strata / MoE",
                     "Expert load, load imbalance and all-to-all time per rank.", [
        row("Expert load", 0),
        panel("heatmap", "Routed tokens per expert (tokens/s)",
              [target(f"sum by (expert) (rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}]))",
                      "{{expert}}")], 0, 1, 24, 10,
              description="One row per routed expert (all MoE layers, all selected ranks).",
              options={"calculate": False, "yAxis": {"axisLabel": "expert"}, "cellGap": 0,
                       "color": {"scheme": "Spectral", "mode": "scheme", "reverse": True},
                       "rowsFrame": {"layout": "auto"}}),
        panel("timeseries", "Expert load imbalance (max / mean) per rank",
              [target(f"strata:expert_load_imbalance{{{s}}}", "rank {{rank}}")], 0, 11, 12, 8,
              description="1 = every expert receives the same number of tokens."),
        panel("bargauge", "Hottest experts (share of routed tokens)",
              [target(f"topk(10, sum by (expert) (rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}])) / "
                      f"scalar(sum(rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}]))))",
                      "expert {{expert}}", fmt="table")],
              12, 11, 12, 8, unit="percentunit",
              options={"orientation": "horizontal", "displayMode": "gradient",
                       "reduceOptions": {"calcs": ["lastNotNull"], "values": False}}),
        panel("timeseries", "Global imbalance across ranks' routing (max / mean over experts)",
              [target(f"max(sum by (expert) (rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}]))) / "
                      f"avg(sum by (expert) (rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}])))",
                      "max / mean")], 0, 19, 12, 8),
        panel("timeseries", "Routed tokens per rank",
              [target(f"sum by (rank) (rate(strata:expert_routed_tokens_total{{{s}}}[{RATE}]))",
                      "rank {{rank}}")], 12, 19, 12, 8),
        row("All-to-all", 27),
        panel("timeseries", "All-to-all time per step, per rank",
              quantiles("strata:all_to_all_seconds", by="le, rank", qs=(0.5, 0.99)), 0, 28, 12, 8,
              unit="s"),
        panel("timeseries", "Share of step time in all-to-all, per rank",
              [target(f"sum by (rank) (rate(strata:all_to_all_seconds_sum{{{s}}}[{RATE}])) / "
                      f"sum by (rank) (rate(strata:step_duration_seconds_sum{{{s}}}[{RATE}]))",
                      "rank {{rank}}")], 12, 28, 12, 8, unit="percentunit"),
    ])


DASHBOARDS = {"overview.json": overview, "caches.json": caches, "moe.json": moe}


def render(make):
    return json.dumps(make(), indent=2, sort_keys=True) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed file is stale")
    parser.add_argument("--out", default=HERE, help="output folder (default: beside this script)")
    args = parser.parse_args()
    stale = []
    for name, make in DASHBOARDS.items():
        path = os.path.join(args.out, name)
        text = render(make)
        if args.check:
            try:
                with open(path) as f:
                    current = f.read()
            except OSError:
                current = None
            if current != text:
                stale.append(name)
        else:
            with open(path, "w") as f:
                f.write(text)
    if stale:
        print("stale dashboards (rerun deploy/grafana/generate_dashboards.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
