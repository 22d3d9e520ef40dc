import assert from "node:assert/strict";
import { decodeProtectedHeader, jwtVerify, SignJWT, UnsecuredJWT } from "jose";
import { type AccessTokenClaims, createTokenSigner } from "../src/jwt.ts";

const SECRET = "jwt-test-secret-that-is-at-least-32-bytes";
const ISSUER = "https://auth.example.org";
/** Not on a whole second, to show `iat` is floored from it. */
const NOW_MS = Date.parse("2026-03-04T05:06:07.890Z");
const NOW_S = Math.floor(NOW_MS / 1000);
const TTL = 3600;

const CLAIMS: AccessTokenClaims = {
  iss: ISSUER,
  sub: "4242",
  aud: "client-1",
  sid: "session-1",
  scope: "mcp:tools mcp:resources",
  gitlab_user: "ada",
};

const rawKey = () => new TextEncoder().encode(SECRET);

Deno.test("TokenSigner.sign", async (t) => {
  const signer = createTokenSigner([SECRET]);
  const token = await signer.sign(CLAIMS, NOW_MS, TTL);

  await t.step("is a compact JWS with alg HS256 in the header", () => {
    assert.equal(token.split(".").length, 3);
    const header = decodeProtectedHeader(token);
    assert.equal(header.alg, "HS256");
    assert.equal(header.typ, "JWT");
  });
  await t.step("verifies with jose.jwtVerify against the raw secret", async () => {
    const { payload, protectedHeader } = await jwtVerify(token, rawKey(), {
      algorithms: ["HS256"],
      issuer: ISSUER,
      audience: "client-1",
      currentDate: new Date(NOW_MS),
    });
    assert.equal(protectedHeader.alg, "HS256");
    assert.ok(payload);
  });
  await t.step("carries exactly the given claims, with times from nowMs", async () => {
    const { payload } = await jwtVerify(token, rawKey(), { currentDate: new Date(NOW_MS) });
    assert.deepEqual({ ...payload }, { ...CLAIMS, iat: NOW_S, exp: NOW_S + TTL });
  });
  await t.step("times follow nowMs, not the wall clock", async () => {
    const past = Date.parse("2001-09-09T01:46:40Z");
    const old = await signer.sign(CLAIMS, past, 60);
    const { payload } = await jwtVerify(old, rawKey(), { currentDate: new Date(past) });
    assert.equal(payload.iat, past / 1000);
    assert.equal(payload.exp, past / 1000 + 60);
  });
  await t.step("claims outside ASCII are signed as their UTF-8 bytes", async () => {
    const claims = { ...CLAIMS, gitlab_user: "zoë-日本", resource: "https://mcp.example.org/ü" };
    const signed = await signer.sign(claims, NOW_MS, TTL);
    const { payload } = await jwtVerify(signed, rawKey(), { currentDate: new Date(NOW_MS) });
    assert.equal(payload.gitlab_user, "zoë-日本");
    assert.equal(payload.resource, "https://mcp.example.org/ü");
  });
  await t.step("a rotated signer signs with the first secret only", async () => {
    const rotated = createTokenSigner(["another-secret-that-is-at-least-32-bytes", SECRET]);
    const signed = await rotated.sign(CLAIMS, NOW_MS, TTL);
    await assert.rejects(jwtVerify(signed, rawKey(), { currentDate: new Date(NOW_MS) }));
    assert.equal((await rotated.verify(signed, ISSUER, NOW_MS)).sub, "4242");
  });
});

Deno.test("TokenSigner.verify", async (t) => {
  const signer = createTokenSigner([SECRET]);
  const token = await signer.sign(CLAIMS, NOW_MS, TTL);
  const expMs = (NOW_S + TTL) * 1000;

  await t.step("accepts its own token and returns the claims", async () => {
    const claims = await signer.verify(token, ISSUER, NOW_MS);
    assert.deepEqual({ ...claims }, { ...CLAIMS, iat: NOW_S, exp: NOW_S + TTL });
  });
  await t.step("accepts it until just before exp", async () => {
    await signer.verify(token, ISSUER, expMs - 1000);
  });
  await t.step("rejects a wrong issuer", async () => {
    await assert.rejects(signer.verify(token, "https://evil.example.org", NOW_MS));
    await assert.rejects(signer.verify(token, `${ISSUER}/`, NOW_MS));
  });
  await t.step("rejects an expired token (nowMs after exp)", async () => {
    await assert.rejects(signer.verify(token, ISSUER, expMs + 1));
    await assert.rejects(signer.verify(token, ISSUER, expMs + 24 * 3600 * 1000));
  });
  await t.step("rejects an alg: none token", async () => {
    const unsecured = new UnsecuredJWT({ sid: CLAIMS.sid, scope: CLAIMS.scope })
      .setIssuer(ISSUER)
      .setSubject(CLAIMS.sub)
      .setAudience(CLAIMS.aud)
      .setIssuedAt(NOW_S)
      .setExpirationTime(NOW_S + TTL)
      .encode();
    assert.equal(decodeProtectedHeader(unsecured).alg, "none");
    await assert.rejects(signer.verify(unsecured, ISSUER, NOW_MS));
    // The real token's payload under an alg: none header, signature dropped.
    const [, payload] = token.split(".");
    const noneHeader = btoa(JSON.stringify({ alg: "none", typ: "JWT" }))
      .replaceAll("=", "").replaceAll("+", "-").replaceAll("/", "_");
    await assert.rejects(signer.verify(`${noneHeader}.${payload}.`, ISSUER, NOW_MS));
  });
  await t.step("rejects a token signed with another secret", async () => {
    const other = createTokenSigner(["another-secret-that-is-also-32-bytes-long"]);
    const forged = await other.sign(CLAIMS, NOW_MS, TTL);
    await assert.rejects(signer.verify(forged, ISSUER, NOW_MS));
  });
  await t.step("rejects another HMAC algorithm with the same secret", async () => {
    const hs512 = await new SignJWT({ ...CLAIMS })
      .setProtectedHeader({ alg: "HS512" })
      .setIssuedAt(NOW_S)
      .setExpirationTime(NOW_S + TTL)
      .sign(rawKey());
    await assert.rejects(signer.verify(hs512, ISSUER, NOW_MS));
  });
  await t.step("rejects a tampered payload", async () => {
    const [header, , signature] = token.split(".");
    const payload = btoa(JSON.stringify({ ...CLAIMS, sub: "1", iat: NOW_S, exp: NOW_S + TTL }))
      .replaceAll("=", "").replaceAll("+", "-").replaceAll("/", "_");
    await assert.rejects(signer.verify(`${header}.${payload}.${signature}`, ISSUER, NOW_MS));
  });
});
