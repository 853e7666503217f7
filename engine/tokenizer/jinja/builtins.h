// Built-in filters, tests, methods and global functions.
//
// Filters: abs, capitalize, count, d/default, dictsort, e/escape, first, float, indent, int,
// items, join, last, length, list, lower, map, max, min, reject, rejectattr, replace, reverse,
// round, safe, select, selectattr, sort, string, sum, title, tojson, trim, unique, upper.
// Tests: boolean, callable, defined, divisibleby, eq/equalto/==, even, false, float, ge/>=,
// gt/>, in, integer, iterable, le/<=, lower, lt/<, mapping, ne/!=, none, number, odd, sameas,
// sequence, string, true, undefined, upper.
// Methods: str.{upper, lower, strip, lstrip, rstrip, title, capitalize, startswith, endswith,
// split, rsplit, splitlines, replace, find, rfind, count, join, isdigit, isalpha, isspace,
// islower, isupper}, dict.{get, items, keys, values}.
// Globals: range, namespace, dict, raise_exception, strftime_now, true/false/none (and the
// Python spellings True/False/None).
// Case mapping (upper, lower, title, capitalize) covers ASCII only.
#pragma once

#include <optional>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/tokenizer/jinja/interpreter.h"
#include "engine/tokenizer/jinja/value.h"

namespace strata::engine::jinja {

void InstallGlobals(ObjectData* globals);

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, const Value& v,
                                  CallArgs& args);

absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& v,
                               CallArgs& args);

// `receiver.name` as a bound method, or nullopt when the type has no such method.
std::optional<Value> BoundMethod(const Value& receiver, std::string_view name);

}  // namespace strata::engine::jinja
