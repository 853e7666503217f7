// Offline batch inference: an OpenAI Batch input file (batch_line.h) run through an HTTP
// handler (the OpenAI front end, without sockets) as concurrent requests, so the engine's
// continuous batching sees many at once; one output line per input line, in input order.
//
//   input lines ─► ParseBatchLine ─► HttpHandler::Handle ─► PendingResponse::Poll (on wake)
//                                                                  │
//   output lines ◄── in input order ◄── finished out of order ◄────┘
//
// At most `max_in_flight` requests are submitted and unfinished at a time, and at most
// `max_waiting_lines` finished lines wait for an earlier, longer one; lines are read as room
// frees, so memory does not grow with the input's length (but for the custom_ids kept to refuse
// a repeated one: OpenAI's limit is 50,000 lines a file). A request the handler refuses as
// over its queue (429) is sent again when another finishes. Blank lines are skipped; every
// other line gets exactly one output line.
#pragma once

#include <cstdint>
#include <functional>
#include <istream>
#include <optional>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "server/batch/batch_line.h"
#include "server/http/http_types.h"

namespace strata::batch {

struct BatchProgress {
  int64_t lines = 0;         // requests read (non-blank lines)
  int64_t finished = 0;      // output lines written
  int64_t succeeded = 0;     // responses with a 2xx status
  int64_t failed = 0;        // responses with another status
  int64_t invalid = 0;       // lines not sent (error lines)
  int64_t cancelled = 0;     // lines read but not sent because the run stopped (error lines)
  int64_t expired = 0;       // lines not sent because the run expired (error lines)
  bool stopped = false;      // BatchOptions::stop ended the input early
  bool expired_run = false;  // BatchOptions::expire did
  // BatchOptions::pause ended the run: `finished` lines were written, none after them.
  bool paused = false;
  int64_t skipped = 0;    // requests not sent: written before (in lines, finished)
  int64_t in_flight = 0;  // submitted and unfinished (at the time of the report)
  BatchUsage usage;       // summed over the responses
  double elapsed_s = 0;
  bool input_done = false;
};

struct BatchOptions {
  int64_t max_in_flight = 256;  // >= 1
  // Finished output lines held for input order before no new line is read until the earliest
  // unfinished one finishes (>= 1).
  int64_t max_waiting_lines = 4096;
  // Called on the runner's thread about every `progress_interval_s` and once at the end.
  std::function<void(const BatchProgress&)> on_progress;
  double progress_interval_s = 10.0;
  // Polled before each new line: true stops reading (the requests in flight finish and are
  // written; those waiting to be re-sent after a 429 become "batch_cancelled" error lines).
  // Null: the whole input runs.
  std::function<bool()> stop;
  // Polled while requests are in flight (about every progress_interval_s and on each
  // response): true stops reading and cancels them too (their lines: "batch_cancelled"). For a
  // server that must go now. Null: never.
  std::function<bool()> abort;
  // Polled with `stop`: true ends the run as OpenAI's batches expire (their completion window
  // passed): requests in flight finish and are written; every line not yet sent — those
  // waiting to be re-sent and the rest of the input — gets a "batch_expired" error line. Null:
  // never.
  std::function<bool()> expire;
  // Polled with `stop` and `abort`: true ends the run as a pause instead. Nothing more is read;
  // lines not answered yet (waiting to be re-sent, or cancelled by `abort`) get no output line,
  // nor does any line after the first of them — so that a later run over the same input with
  // the first BatchProgress::finished requests `written_before` carries on where this one ends,
  // every line written once. (A server going down that keeps its batch.) Null: never.
  std::function<bool()> pause;
  // By request index (non-blank lines, from 0): true for the requests whose lines an earlier
  // run's output holds (checked: batch_store.h KeepValidLines). They are read (their custom_ids
  // still count for repeats) but neither sent nor written; the others run, so a line the
  // earlier run lost or wrote wrong is answered now, after the lines of the requests around
  // it (the output is in input order only when the written ones are a prefix, as a pause leaves
  // them; OpenAI's output files promise no order). Indexes past its end: not written.
  std::vector<bool> written_before;
  // vLLM's request priority for lines whose body sets none (with --scheduling-policy priority,
  // lower runs first; online requests default to 0). Unset: bodies go as written.
  std::optional<int> default_priority;
  // Headers every request carries besides Content-Type (a served batch's: its creator's
  // Authorization, so the service's API key check passes as it did for the batch).
  std::vector<http::Header> headers;
  // Where the lines that are not a 2xx response (API errors, lines not sent) go instead of
  // `out`, in input order among themselves (OpenAI's error file). Null: every line to `out`.
  std::ostream* error_out = nullptr;
  // The output lines' "id" is "batch_req_" + id_prefix + the line's index.
  std::string id_prefix;
};

// Runs every line of `in` through `handler`, writing the output lines to `out`, each flushed as
// it is written (a run that dies leaves whole lines but for the last, in order). Errors only
// for the files: `in` unreadable midway or `out` failing a write (DataLoss / Internal, naming
// the line); a bad line or a failed request is an output line, never an error.
absl::StatusOr<BatchProgress> RunBatch(http::HttpHandler& handler, std::istream& in,
                                       std::ostream& out, const BatchOptions& options);

}  // namespace strata::batch
