/**
 * The scopes this service grants. Every session gets both; the requested `scope` is not used.
 *
 * @see spec §1.6
 */

/** The scope an MCP request needs unless told otherwise. */
export const MCP_TOOLS_SCOPE = "mcp:tools";

/** Granted scopes are always these two (spec §1.6). */
export const GRANTED_SCOPES = [MCP_TOOLS_SCOPE, "mcp:resources"] as const;
