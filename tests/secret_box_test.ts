import assert from "node:assert/strict";
import { createSecretBox } from "../src/secret_box.ts";

const OLD = "an-old-secret-that-is-at-least-32-bytes!";
const NEW = "a-new-secret-that-is-at-least-32-bytes!!";

Deno.test("secret box: seals with AES-GCM, opens, refuses tampering and strangers", async () => {
  const box = createSecretBox([NEW]);
  const sealed = await box.seal("glpat-secret");
  assert.doesNotMatch(sealed, /glpat-secret/);
  assert.notEqual(await box.seal("glpat-secret"), sealed, "a fresh IV every time");
  assert.equal(await box.open(sealed), "glpat-secret");
  const [format, id, iv, ciphertext] = sealed.split(".");
  const flipped = ciphertext.slice(0, -2) + (ciphertext.at(-2) === "A" ? "B" : "A") +
    ciphertext.at(-1);
  await assert.rejects(box.open([format, id, iv, flipped].join(".")));
  await assert.rejects(createSecretBox([OLD]).open(sealed));
  await assert.rejects(box.open("not sealed"));
});

Deno.test("secret box: a retired secret still opens, and what it sealed is not current", async () => {
  const before = createSecretBox([OLD]);
  const sealedBefore = await before.seal("token");
  const after = createSecretBox([NEW, OLD]);
  assert.equal(await after.open(sealedBefore), "token");
  assert.equal(await after.isCurrent(sealedBefore), false);
  assert.equal(await after.isCurrent(await after.seal("token")), true);
});
