#include "engine/tokenizer/chat_template.h"

namespace strata::engine {

std::string_view BuiltinKimiChatTemplate() {
  static constexpr char kTemplate[] = R"JINJA({%- macro render_content(content) -%}
  {%- if content is string -%}
    {{- content -}}
  {%- elif content is not none and content is defined -%}
    {%- for part in content -%}
      {%- if part['type'] in ['image', 'image_url'] -%}
        {{- '<|media_start|>image<|media_content|><|media_pad|><|media_end|>' -}}
      {%- else -%}
        {{- part['text'] -}}
      {%- endif -%}
    {%- endfor -%}
  {%- endif -%}
{%- endmacro -%}
{%- if tools -%}
  {{- '<|im_system|>tool_declare<|im_middle|>' + tools | tojson(separators=(',', ':')) + '<|im_end|>' -}}
{%- endif -%}
{%- if messages | length == 0 or messages[0]['role'] not in ['system', 'developer'] -%}
  {{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' -}}
{%- endif -%}
{%- for message in messages -%}
  {%- set role = 'system' if message['role'] == 'developer' else message['role'] -%}
  {%- set role_name = message.get('name') or role -%}
  {%- if role == 'user' -%}
    {{- '<|im_user|>' + role_name + '<|im_middle|>' -}}
  {%- elif role == 'assistant' -%}
    {{- '<|im_assistant|>' + role_name + '<|im_middle|>' -}}
  {%- else -%}
    {{- '<|im_system|>' + role_name + '<|im_middle|>' -}}
  {%- endif -%}
  {%- if role == 'assistant' -%}
    {{- render_content(message.get('content')) -}}
    {%- if message.get('tool_calls') -%}
      {{- '<|tool_calls_section_begin|>' -}}
      {%- for call in message['tool_calls'] -%}
        {%- set arguments = call['function']['arguments'] -%}
        {{- '<|tool_call_begin|>' + call['id'] + '<|tool_call_argument_begin|>' -}}
        {{- arguments if arguments is string else arguments | tojson(separators=(',', ':')) -}}
        {{- '<|tool_call_end|>' -}}
      {%- endfor -%}
      {{- '<|tool_calls_section_end|>' -}}
    {%- endif -%}
  {%- elif role == 'tool' -%}
    {{- '## Return of ' + message.get('tool_call_id', '') + '\n' -}}
    {{- render_content(message.get('content')) -}}
  {%- else -%}
    {{- render_content(message.get('content')) -}}
  {%- endif -%}
  {{- '<|im_end|>' -}}
{%- endfor -%}
{%- if add_generation_prompt -%}
  {{- '<|im_assistant|>assistant<|im_middle|>' -}}
  {%- if thinking is defined and thinking -%}{{- '<think>' -}}{%- endif -%}
{%- endif -%})JINJA";
  return kTemplate;
}

}  // namespace strata::engine
