/**
 * Issue 22 §1.8: a wildcard segment in ALLOWED_REDIRECT_URIS must not admit a dot segment,
 * raw or percent-encoded: a browser resolves `/callback/..` to a path the operator never allowed.
 */

import assert from "node:assert/strict";
import { isAllowedRedirect } from "../src/clients/redirect_allow_list.ts";

const PATTERNS = [
  "https://app.example/callback/*",
  "http://127.0.0.1:*/*?next=..",
  "http://127.0.0.1:*/*",
  "cursor://*",
];

Deno.test("redirect allow-list: dot segments are refused before matching, raw or encoded", () => {
  for (
    const uri of [
      "https://app.example/callback/..",
      "https://app.example/callback/.",
      "https://app.example/callback/%2e%2e",
      "https://app.example/callback/%2E%2e",
      "https://app.example/callback/.%2e",
      "https://app.example/callback/%2e",
      "https://app.example/callback/..?x=1",
      "http://127.0.0.1:8080/..",
      "http://127.0.0.1:8080/%2E%2E#frag",
      "cursor://..",
      // A URL parser drops a tab or line break anywhere, and spaces or controls at the ends.
      "https://app.example/callback/.\t.",
      "https://app.example/callback/.\n.",
      "https://app.example/callback/\r..",
      "https://app.example/callback/.. ",
      "https://app.example/callback/..\x00",
      "https://app.example/callback/a b",
    ]
  ) assert.equal(isAllowedRedirect(uri, PATTERNS), false, JSON.stringify(uri));
});

Deno.test("redirect allow-list: dots inside a segment or in the query still match", () => {
  for (
    const uri of [
      "https://app.example/callback/a.b",
      "https://app.example/callback/...",
      "http://127.0.0.1:8080/cb?next=..",
      "http://127.0.0.1:8080/callback",
      "cursor://anysphere.cursor-retrieval",
    ]
  ) assert.equal(isAllowedRedirect(uri, PATTERNS), true, uri);
});
