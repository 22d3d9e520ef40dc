import assert from "node:assert/strict";
import { PKCE_METHOD, verifyPkce } from "../src/sign_in/pkce.ts";

/** RFC 7636 Appendix B. */
const VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";

Deno.test("verifyPkce", async (t) => {
  await t.step("the only method is S256", () => {
    assert.equal(PKCE_METHOD, "S256");
  });
  await t.step("RFC 7636 Appendix B vector passes", () => {
    assert.equal(verifyPkce(VERIFIER, CHALLENGE, "S256"), true);
  });
  await t.step("a wrong verifier fails", () => {
    assert.equal(verifyPkce(VERIFIER.slice(0, -1) + "Y", CHALLENGE, "S256"), false);
    assert.equal(verifyPkce(`${VERIFIER}x`, CHALLENGE, "S256"), false);
  });
  await t.step("the challenge itself is not a verifier", () => {
    assert.equal(verifyPkce(CHALLENGE, CHALLENGE, "S256"), false);
  });
  await t.step("method plain fails, even when verifier equals challenge", () => {
    assert.equal(verifyPkce(VERIFIER, CHALLENGE, "plain"), false);
    assert.equal(verifyPkce(CHALLENGE, CHALLENGE, "plain"), false);
  });
  await t.step("other method spellings fail", () => {
    for (const method of ["s256", "", "S256 ", "SHA256"]) {
      assert.equal(verifyPkce(VERIFIER, CHALLENGE, method), false, method);
    }
  });
  await t.step("an empty verifier fails", () => {
    assert.equal(verifyPkce("", CHALLENGE, "S256"), false);
  });
  await t.step("an empty challenge fails", () => {
    assert.equal(verifyPkce(VERIFIER, "", "S256"), false);
  });
  await t.step("a padded challenge fails", () => {
    assert.equal(verifyPkce(VERIFIER, `${CHALLENGE}=`, "S256"), false);
  });
});
