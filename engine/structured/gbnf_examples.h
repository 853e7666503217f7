// Example GBNF grammars shared by the grammar tests and the mask benchmark.
#pragma once

namespace strata::structured {

// A JSON object (any nesting) with optional whitespace after each value.
inline constexpr const char* kJsonObjectGbnf = R"(
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9]{1,16})? ws
ws ::= | " " | "\n" [ \t]{0,20}
)";

}  // namespace strata::structured
