// Conversations for the chat-template peer test: OpenAI message shapes as clients send them
// (tool-call arguments as JSON strings; both renderers parse them into objects first, as vLLM
// does). Object keys are never integer-like (JavaScript would reorder them).
const TOOLS = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather for a \"city\" — in °C or °F.",
      parameters: {
        type: "object",
        properties: {
          city: { type: "string", description: "City name, e.g. 東京" },
          unit: { type: "string", enum: ["c", "f"] },
        },
        required: ["city"],
      },
    },
  },
  {
    type: "function",
    function: {
      name: "search",
      description: "Web search.",
      parameters: {
        type: "object",
        properties: { query: { type: "string" }, top_k: { type: "integer", minimum: 1 } },
        required: ["query"],
      },
    },
  },
];

const weatherCall = (id, city) => ({
  id,
  type: "function",
  function: { name: "get_weather", arguments: JSON.stringify({ city, unit: "c" }) },
});

export const CASES = [
  { name: "user_only", messages: [{ role: "user", content: "Hello!" }] },
  {
    name: "system_user",
    messages: [
      { role: "system", content: "You are terse." },
      { role: "user", content: "2+2?" },
    ],
  },
  {
    name: "multi_turn",
    messages: [
      { role: "system", content: "Be helpful." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello! How can I help?" },
      { role: "user", content: "Tell me a joke." },
    ],
  },
  {
    name: "tool_call_roundtrip",
    tools: TOOLS,
    messages: [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [weatherCall("functions.get_weather:0", "Paris")] },
      { role: "tool", tool_call_id: "functions.get_weather:0", name: "get_weather", content: "18C, sunny" },
      { role: "assistant", content: "It is 18C and sunny in Paris." },
      { role: "user", content: "Thanks!" },
    ],
  },
  {
    name: "parallel_tool_calls",
    tools: TOOLS,
    messages: [
      { role: "system", content: "Use tools." },
      { role: "user", content: "Weather in Oslo and Rome?" },
      {
        role: "assistant",
        content: "Checking both.",
        tool_calls: [weatherCall("functions.get_weather:0", "Oslo"), weatherCall("functions.get_weather:1", "Rome")],
      },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "-2C" },
      { role: "tool", tool_call_id: "functions.get_weather:1", content: "21C" },
    ],
  },
  {
    name: "content_parts",
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "Describe" },
          { type: "image_url", image_url: { url: "data:image/png;base64,AAAA" } },
          { type: "text", text: " this picture." },
        ],
      },
    ],
  },
  {
    name: "developer_role",
    messages: [
      { role: "developer", content: "Answer in French." },
      { role: "user", content: "Good morning" },
    ],
  },
  {
    name: "reasoning",
    messages: [
      { role: "user", content: "Is 17 prime?" },
      { role: "assistant", reasoning_content: "Check divisors up to 4.", content: "Yes." },
      { role: "user", content: "And 21?" },
    ],
  },
  {
    name: "unicode_escapes",
    tools: [TOOLS[0]],
    messages: [
      { role: "system", content: "Quotes \"here\", backslash \\ and tab\there.\nNew line." },
      { role: "user", content: "日本語と中文，한국어, emoji 😀👨‍👩‍👧 and combining é." },
      {
        role: "assistant",
        content: "",
        tool_calls: [{ id: "functions.get_weather:0", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"東京\", \"note\": \"a\\\"b\\n\"}" } }],
      },
      { role: "tool", tool_call_id: "functions.get_weather:0", content: "{\"temp\": \"9°C\"}" },
    ],
  },
  { name: "empty_messages", messages: [] },
  {
    name: "assistant_last",
    messages: [
      { role: "user", content: "Write a haiku." },
      { role: "assistant", content: "Autumn moonlight—" },
    ],
  },
  {
    name: "tool_args_object",
    tools: TOOLS,
    messages: [
      { role: "user", content: "Search cats" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "functions.search:0", type: "function", function: { name: "search", arguments: { query: "cats", top_k: 3 } } }],
      },
      { role: "tool", tool_call_id: "functions.search:0", name: "search", content: "many cats" },
    ],
  },
];

// Extra template variables per template (besides the no-kwargs run).
export const KWARGS = {
  kimi_k2_style: [{ thinking: false }],
  kimi_k3_style: [{ thinking: false }, { effort: "low" }, { effort: "extreme" }],
  llama3_style: [{ date_string: "01 Jan 2025" }],
  strata_builtin_kimi: [{ thinking: true }],
  features: [
    {
      people: [
        { name: "ann", admin: true, role: "dev" },
        { name: "bob", admin: false, role: "ops" },
        { name: "cy", role: "dev" },
      ],
    },
    { people: [], fail: true },
  ],
};

export const SPECIAL_TOKENS = {
  kimi_k2_style: { bos_token: "[BOS]", eos_token: "[EOS]" },
  kimi_k3_style: { bos_token: "[BOS]", eos_token: "[EOS]" },
  strata_builtin_kimi: { bos_token: "[BOS]", eos_token: "[EOS]" },
  chatml: { bos_token: "<s>", eos_token: "<|im_end|>" },
  deepseek_v3_style: { bos_token: "<｜begin▁of▁sentence｜>", eos_token: "<｜end▁of▁sentence｜>" },
  llama3_style: { bos_token: "<|begin_of_text|>", eos_token: "<|eot_id|>" },
  features: {},
};
