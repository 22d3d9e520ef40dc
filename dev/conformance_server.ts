/**
 * An MCP server with the fixtures the official MCP conformance suite's server scenarios call by
 * name (npm `@modelcontextprotocol/conformance`: tools `test_*`, resources `test://...`, prompts
 * `test_*`, completion, logging, progress, sampling, elicitation, subscriptions), written from
 * the scenarios' checks. It speaks the revisions before 2026-07-28 (2025-03-26 to 2025-11-25)
 * with the MCP TypeScript SDK v1's low-level `Server`, over stateful Streamable HTTP on loopback.
 * Like any loopback MCP server without authentication it refuses DNS rebinding: a request whose
 * Host or Origin is not a loopback name gets 403.
 *
 * Used by tests/mcp_conformance_test.ts; `deno run -A dev/conformance_server.ts` serves it on
 * a random port and prints its URL, for running the suite by hand. Development only.
 */

// @ts-types="@modelcontextprotocol/sdk/server/index"
import { Server } from "@modelcontextprotocol/sdk/server/index.js";
// @ts-types="@modelcontextprotocol/sdk/types"
import {
  CallToolRequestSchema,
  type CallToolResult,
  CompleteRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  GetPromptRequestSchema,
  type GetPromptResult,
  ListPromptsRequestSchema,
  ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  type Prompt,
  ReadResourceRequestSchema,
  type ReadResourceResult,
  type Resource,
  SubscribeRequestSchema,
  type Tool,
  UnsubscribeRequestSchema,
} from "@modelcontextprotocol/sdk/types.js";
import { type McpHttpServer, serveMcp } from "./mcp_http.ts";

/** JSON-RPC "invalid params": an unknown tool, prompt or resource. */
const INVALID_PARAMS = -32602;
/** MCP's "resource not found". */
const RESOURCE_NOT_FOUND = -32002;

/** What a tool handler may use of the request it answers. */
export interface ToolCall {
  args: Record<string, unknown>;
  progressToken?: string | number;
  notify(method: string, params: Record<string, unknown>): Promise<void>;
  ask<T>(method: string, params: Record<string, unknown>, schema: ResultSchema<T>): Promise<T>;
}

/** A schema the SDK validates a client's answer with. */
export interface ResultSchema<T> {
  parse(value: unknown): T;
}

export interface ToolFixture {
  tool: Tool;
  call(call: ToolCall): Promise<CallToolResult> | CallToolResult;
}

const NO_ARGUMENTS = { type: "object", properties: {} } as const;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function base64(bytes: Uint8Array): string {
  return btoa(String.fromCharCode(...bytes));
}

/** A 1×1 PNG (one opaque pixel), as the image fixtures carry. */
const PIXEL_PNG = base64(
  Uint8Array.from(
    atob(
      "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC",
    ),
    (char) => char.charCodeAt(0),
  ),
);

/** A short silent WAV file (8 kHz, 8-bit mono, 8 samples), built rather than embedded. */
function silentWav(): string {
  const samples = 8;
  const bytes = new Uint8Array(44 + samples);
  const view = new DataView(bytes.buffer);
  const ascii = (offset: number, text: string) =>
    [...text].forEach((char, i) => view.setUint8(offset + i, char.charCodeAt(0)));
  ascii(0, "RIFF");
  view.setUint32(4, 36 + samples, true);
  ascii(8, "WAVE");
  ascii(12, "fmt ");
  view.setUint32(16, 16, true); // fmt chunk size
  view.setUint16(20, 1, true); // PCM
  view.setUint16(22, 1, true); // mono
  view.setUint32(24, 8000, true); // sample rate
  view.setUint32(28, 8000, true); // byte rate
  view.setUint16(32, 1, true); // block align
  view.setUint16(34, 8, true); // bits per sample
  ascii(36, "data");
  view.setUint32(40, samples, true);
  bytes.fill(128, 44); // 8-bit PCM silence
  return base64(bytes);
}

function text(value: string): CallToolResult {
  return { content: [{ type: "text", text: value }] };
}

function stringArgument(args: Record<string, unknown>, name: string): string {
  const value = args[name];
  if (typeof value !== "string") {
    throw new McpError(INVALID_PARAMS, `argument ${name} must be a string`);
  }
  return value;
}

/** The elicitation form whose fields carry defaults of every primitive type (SEP-1034). */
const DEFAULTS_FORM = {
  type: "object",
  properties: {
    name: { type: "string", description: "Your name", default: "John Doe" },
    age: { type: "integer", description: "Your age", default: 30 },
    score: { type: "number", description: "Your score", default: 95.5 },
    status: {
      type: "string",
      description: "Account status",
      enum: ["active", "inactive", "pending"],
      default: "active",
    },
    verified: { type: "boolean", description: "Verified?", default: true },
  },
};

/** The elicitation form with each enum shape of SEP-1330. */
const ENUMS_FORM = {
  type: "object",
  properties: {
    untitledSingle: { type: "string", enum: ["option1", "option2", "option3"] },
    titledSingle: {
      type: "string",
      oneOf: [
        { const: "value1", title: "First Option" },
        { const: "value2", title: "Second Option" },
        { const: "value3", title: "Third Option" },
      ],
    },
    legacyEnum: {
      type: "string",
      enum: ["opt1", "opt2", "opt3"],
      enumNames: ["Option One", "Option Two", "Option Three"],
    },
    untitledMulti: {
      type: "array",
      items: { type: "string", enum: ["option1", "option2", "option3"] },
    },
    titledMulti: {
      type: "array",
      items: {
        anyOf: [
          { const: "value1", title: "First Choice" },
          { const: "value2", title: "Second Choice" },
          { const: "value3", title: "Third Choice" },
        ],
      },
    },
  },
};

async function elicit(call: ToolCall, message: string, requestedSchema: object) {
  const answer = await call.ask(
    "elicitation/create",
    { message, requestedSchema },
    ElicitResultSchema,
  );
  return text(
    `Elicitation completed: action=${answer.action}, content=${
      JSON.stringify(answer.content ?? {})
    }`,
  );
}

export const TOOLS: ToolFixture[] = [
  {
    tool: { name: "test_simple_text", description: "Answers with text", inputSchema: NO_ARGUMENTS },
    call: () => text("This is a simple text response for testing."),
  },
  {
    tool: {
      name: "test_image_content",
      description: "Answers with a PNG image",
      inputSchema: NO_ARGUMENTS,
    },
    call: () => ({ content: [{ type: "image", data: PIXEL_PNG, mimeType: "image/png" }] }),
  },
  {
    tool: {
      name: "test_audio_content",
      description: "Answers with a WAV clip",
      inputSchema: NO_ARGUMENTS,
    },
    call: () => ({ content: [{ type: "audio", data: silentWav(), mimeType: "audio/wav" }] }),
  },
  {
    tool: {
      name: "test_embedded_resource",
      description: "Answers with an embedded text resource",
      inputSchema: NO_ARGUMENTS,
    },
    call: () => ({
      content: [{
        type: "resource",
        resource: {
          uri: "test://embedded-resource",
          mimeType: "text/plain",
          text: "This is an embedded resource content.",
        },
      }],
    }),
  },
  {
    tool: {
      name: "test_multiple_content_types",
      description: "Answers with text, an image and a resource",
      inputSchema: NO_ARGUMENTS,
    },
    call: () => ({
      content: [
        { type: "text", text: "Multiple content types test:" },
        { type: "image", data: PIXEL_PNG, mimeType: "image/png" },
        {
          type: "resource",
          resource: {
            uri: "test://mixed-content-resource",
            mimeType: "application/json",
            text: JSON.stringify({ test: "data", value: 123 }),
          },
        },
      ],
    }),
  },
  {
    tool: {
      name: "test_tool_with_logging",
      description: "Logs three messages while it runs",
      inputSchema: NO_ARGUMENTS,
    },
    async call({ notify }) {
      const log = (data: string) =>
        notify("notifications/message", { level: "info", logger: "conformance", data });
      await log("Tool execution started");
      await sleep(50);
      await log("Tool processing data");
      await sleep(50);
      await log("Tool execution completed");
      return text("Logged three messages");
    },
  },
  {
    tool: {
      name: "test_error_handling",
      description: "Always fails",
      inputSchema: NO_ARGUMENTS,
    },
    call: () => ({
      isError: true,
      content: [{ type: "text", text: "This tool intentionally returns an error for testing" }],
    }),
  },
  {
    tool: {
      name: "test_tool_with_progress",
      description: "Reports progress 0, 50 and 100 of 100",
      inputSchema: NO_ARGUMENTS,
    },
    async call({ progressToken, notify }) {
      for (const progress of [0, 50, 100]) {
        if (progress > 0) await sleep(50);
        if (progressToken !== undefined) {
          await notify("notifications/progress", { progressToken, progress, total: 100 });
        }
      }
      return text("Reported progress to 100");
    },
  },
  {
    tool: {
      name: "test_sampling",
      description: "Asks the client's model to answer a prompt",
      inputSchema: {
        type: "object",
        properties: { prompt: { type: "string", description: "What to ask the model" } },
        required: ["prompt"],
      },
    },
    async call(call) {
      const prompt = stringArgument(call.args, "prompt");
      const answer = await call.ask("sampling/createMessage", {
        messages: [{ role: "user", content: { type: "text", text: prompt } }],
        maxTokens: 100,
      }, CreateMessageResultSchema);
      const content = answer.content as { type: string; text?: string };
      return text(`LLM response: ${content.type === "text" ? content.text : content.type}`);
    },
  },
  {
    tool: {
      name: "test_elicitation",
      description: "Asks the user for a username and an email address",
      inputSchema: {
        type: "object",
        properties: { message: { type: "string", description: "What to tell the user" } },
        required: ["message"],
      },
    },
    call: (call) =>
      elicit(call, stringArgument(call.args, "message"), {
        type: "object",
        properties: {
          username: { type: "string", description: "User's response" },
          email: { type: "string", description: "User's email address" },
        },
        required: ["username", "email"],
      }),
  },
  {
    tool: {
      name: "test_elicitation_sep1034_defaults",
      description: "Asks the user to fill in a form whose fields have defaults",
      inputSchema: NO_ARGUMENTS,
    },
    call: (call) => elicit(call, "Please review your details", DEFAULTS_FORM),
  },
  {
    tool: {
      name: "test_elicitation_sep1330_enums",
      description: "Asks the user to pick from every kind of enum",
      inputSchema: NO_ARGUMENTS,
    },
    call: (call) => elicit(call, "Please pick your options", ENUMS_FORM),
  },
];

/** Direct resources: their listing entry and contents. */
export const RESOURCES: { resource: Resource; read(): ReadResourceResult }[] = [
  {
    resource: {
      uri: "test://static-text",
      name: "static-text",
      description: "A fixed text resource",
      mimeType: "text/plain",
    },
    read: () => ({
      contents: [{
        uri: "test://static-text",
        mimeType: "text/plain",
        text: "This is the content of the static text resource.",
      }],
    }),
  },
  {
    resource: {
      uri: "test://static-binary",
      name: "static-binary",
      description: "A fixed PNG image",
      mimeType: "image/png",
    },
    read: () => ({
      contents: [{ uri: "test://static-binary", mimeType: "image/png", blob: PIXEL_PNG }],
    }),
  },
  {
    resource: {
      uri: "test://watched-resource",
      name: "watched-resource",
      description: "A resource clients may subscribe to",
      mimeType: "text/plain",
    },
    read: () => ({
      contents: [{ uri: "test://watched-resource", mimeType: "text/plain", text: "watched" }],
    }),
  },
];

/** The fixture resource template's listing entry. */
export const TEMPLATE = {
  uriTemplate: "test://template/{id}/data",
  name: "template-data",
  description: "JSON data for an id",
  mimeType: "application/json",
};
const TEMPLATE_PATTERN = /^test:\/\/template\/([^/]+)\/data$/;

/** The contents of a direct or templated fixture resource; undefined for any other URI. */
export function readFixture(uri: string): ReadResourceResult | undefined {
  return RESOURCES.find(({ resource }) => resource.uri === uri)?.read() ?? readTemplate(uri);
}

function readTemplate(uri: string): ReadResourceResult | undefined {
  const id = TEMPLATE_PATTERN.exec(uri)?.[1];
  if (id === undefined) return undefined;
  const data = { id, templateTest: true, data: `Data for ID: ${id}` };
  return { contents: [{ uri, mimeType: "application/json", text: JSON.stringify(data) }] };
}

export interface PromptFixture {
  prompt: Prompt;
  get(args: Record<string, string>): GetPromptResult;
}

export const PROMPTS: PromptFixture[] = [
  {
    prompt: { name: "test_simple_prompt", description: "A prompt without arguments" },
    get: () => ({
      messages: [{
        role: "user",
        content: { type: "text", text: "This is a simple prompt for testing." },
      }],
    }),
  },
  {
    prompt: {
      name: "test_prompt_with_arguments",
      description: "A prompt that quotes its two arguments",
      arguments: [
        { name: "arg1", description: "First test argument", required: true },
        { name: "arg2", description: "Second test argument", required: true },
      ],
    },
    get: ({ arg1, arg2 }) => ({
      messages: [{
        role: "user",
        content: { type: "text", text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` },
      }],
    }),
  },
  {
    prompt: {
      name: "test_prompt_with_embedded_resource",
      description: "A prompt that embeds the resource it is given",
      arguments: [{ name: "resourceUri", description: "The resource to embed", required: true }],
    },
    get: ({ resourceUri }) => ({
      messages: [
        {
          role: "user",
          content: {
            type: "resource",
            resource: {
              uri: resourceUri,
              mimeType: "text/plain",
              text: "Embedded resource content for testing.",
            },
          },
        },
        {
          role: "user",
          content: { type: "text", text: "Please process the embedded resource above." },
        },
      ],
    }),
  },
  {
    prompt: { name: "test_prompt_with_image", description: "A prompt with an image" },
    get: () => ({
      messages: [
        { role: "user", content: { type: "image", data: PIXEL_PNG, mimeType: "image/png" } },
        { role: "user", content: { type: "text", text: "Please analyze the image above." } },
      ],
    }),
  },
];

/** The prompt's messages, or why it cannot be had (unknown prompt, missing argument). */
export function getFixturePrompt(
  name: string,
  args: Record<string, string>,
): GetPromptResult | string {
  const fixture = PROMPTS.find(({ prompt }) => prompt.name === name);
  if (!fixture) return `no prompt ${name}`;
  const missing = (fixture.prompt.arguments ?? [])
    .filter((argument) => argument.required && args[argument.name] === undefined);
  if (missing.length > 0) return `missing ${missing.map((argument) => argument.name).join(", ")}`;
  return fixture.get(args);
}

/** Completions offered for `test_prompt_with_arguments`' arguments. */
const SUGGESTIONS = ["paris", "park", "party", "test", "testing"];

/** Completion of any argument: the suggestions that start with `value`. */
export function completeFixture(value: string) {
  const values = SUGGESTIONS.filter((suggestion) => suggestion.startsWith(value));
  return { completion: { values, total: values.length, hasMore: false } };
}

/** One MCP session's server: the fixtures, and the URIs this session subscribed to. */
export function createConformanceServer(): Server {
  const server = new Server(
    { name: "gitlab-mcp-auth-conformance-fixtures", version: "1.0.0" },
    {
      capabilities: {
        tools: {},
        resources: { subscribe: true },
        prompts: {},
        completions: {},
        logging: {},
      },
    },
  );
  const subscriptions = new Set<string>();

  server.setRequestHandler(
    ListToolsRequestSchema,
    () => ({ tools: TOOLS.map(({ tool }) => tool) }),
  );
  server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const fixture = TOOLS.find(({ tool }) => tool.name === request.params.name);
    if (!fixture) throw new McpError(INVALID_PARAMS, `no tool ${request.params.name}`);
    return await fixture.call({
      args: request.params.arguments ?? {},
      progressToken: request.params._meta?.progressToken,
      notify: (method, params) => extra.sendNotification({ method, params } as never),
      ask: (method, params, schema) =>
        extra.sendRequest({ method, params } as never, schema as never) as never,
    });
  });

  server.setRequestHandler(ListResourcesRequestSchema, () => ({
    resources: RESOURCES.map(({ resource }) => resource),
  }));
  server.setRequestHandler(ListResourceTemplatesRequestSchema, () => ({
    resourceTemplates: [TEMPLATE],
  }));
  server.setRequestHandler(ReadResourceRequestSchema, (request) => {
    const { uri } = request.params;
    const result = readFixture(uri);
    if (!result) throw new McpError(RESOURCE_NOT_FOUND, "Resource not found", { uri });
    return result;
  });
  server.setRequestHandler(SubscribeRequestSchema, (request) => {
    subscriptions.add(request.params.uri);
    return {};
  });
  server.setRequestHandler(UnsubscribeRequestSchema, (request) => {
    subscriptions.delete(request.params.uri);
    return {};
  });

  server.setRequestHandler(ListPromptsRequestSchema, () => ({
    prompts: PROMPTS.map(({ prompt }) => prompt),
  }));
  server.setRequestHandler(GetPromptRequestSchema, (request) => {
    const { name, arguments: args = {} } = request.params;
    const answer = getFixturePrompt(name, args);
    if (typeof answer === "string") throw new McpError(INVALID_PARAMS, answer);
    return answer;
  });

  server.setRequestHandler(CompleteRequestSchema, (request) => {
    return completeFixture(request.params.argument.value);
  });
  return server;
}

const LOOPBACK_NAMES = new Set(["localhost", "127.0.0.1", "[::1]"]);

/** Whether `host` (`name` or `name:port`) names this machine's loopback interface. */
function isLoopbackHost(host: string): boolean {
  try {
    return LOOPBACK_NAMES.has(new URL(`http://${host}`).hostname);
  } catch {
    return false;
  }
}

/**
 * DNS-rebinding protection: a page on another site whose name resolves to 127.0.0.1 reaches
 * this server with its own name as Host and Origin. Refuses those; undefined lets it through.
 */
export function refuseRebinding(request: Request): Response | undefined {
  const host = request.headers.get("host");
  const origin = request.headers.get("origin");
  const hostOk = host !== null && isLoopbackHost(host);
  const originOk = origin === null ||
    (URL.canParse(origin) && isLoopbackHost(new URL(origin).host));
  if (hostOk && originOk) return undefined;
  return Response.json(
    { jsonrpc: "2.0", id: null, error: { code: -32000, message: "Host or Origin not allowed" } },
    { status: 403 },
  );
}

/** Serves the fixtures on a random loopback port. */
export function startConformanceServer(): McpHttpServer {
  return serveMcp(createConformanceServer, { refuse: refuseRebinding });
}

if (import.meta.main) {
  const { url } = startConformanceServer();
  // deno-lint-ignore no-console
  console.log(url);
}
