import assert from "node:assert/strict";
import { PKCE_METHOD, verifyPkce } from "../src/pkce.ts";

/** RFC 7636 Appendix B. */
const VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

Deno.test("verifyPkce", async (t) => {
  await t.step("the only method is S256", () => {
    assert.equal(PKCE_METHOD, "S256");
  });
  await t.step("RFC 7636 Appendix B vector passes", async () => {
    assert.equal(await verifyPkce(VERIFIER, CHALLENGE, "S256"), true);
  });
  await t.step("a wrong verifier fails", async () => {
    assert.equal(await verifyPkce(VERIFIER.slice(0, -1) + "Y", CHALLENGE, "S256"), false);
    assert.equal(await verifyPkce(`${VERIFIER}x`, CHALLENGE, "S256"), false);
  });
  await t.step("the challenge itself is not a verifier", async () => {
    assert.equal(await verifyPkce(CHALLENGE, CHALLENGE, "S256"), false);
  });
  await t.step("method plain fails, even when verifier equals challenge", async () => {
    assert.equal(await verifyPkce(VERIFIER, CHALLENGE, "plain"), false);
    assert.equal(await verifyPkce(CHALLENGE, CHALLENGE, "plain"), false);
  });
  await t.step("other method spellings fail", async () => {
    for (const method of ["s256", "", "S256 ", "SHA256"]) {
      assert.equal(await verifyPkce(VERIFIER, CHALLENGE, method), false, method);
    }
  });
  await t.step("an empty verifier fails", async () => {
    assert.equal(await verifyPkce("", CHALLENGE, "S256"), false);
  });
  await t.step("an empty challenge fails", async () => {
    assert.equal(await verifyPkce(VERIFIER, "", "S256"), false);
  });
  await t.step("a padded challenge fails", async () => {
    assert.equal(await verifyPkce(VERIFIER, `${CHALLENGE}=`, "S256"), false);
  });
});
