/**
 * What a DATABASE_URL's `sslmode` and `sslrootcert` ask of TLS, with libpq's meanings. Read when
 * the configuration is loaded (a bad value stops start-up) and again when the store connects
 * (tls.ts); kept apart from tls.ts so that loading the configuration pulls in no `node:tls`.
 */

/** The `sslmode` values accepted (libpq's, except `allow`, which the driver cannot do). */
export const SSL_MODES = ["disable", "prefer", "require", "verify-ca", "verify-full"] as const;
export type SslMode = typeof SSL_MODES[number];

/** libpq's default: TLS when the server offers it, unverified. */
const DEFAULT_SSL_MODE: SslMode = "prefer";

/** What the URL asks of TLS. */
export interface TlsSettings {
  mode: SslMode;
  /** `sslrootcert`: a PEM file of the CAs to trust, or "system" (Deno's default roots). */
  rootCert?: string;
}

/**
 * The drivers' own spelling, `ssl=…` (node-postgres, postgres.js), as the `sslmode` it means:
 * read rather than left to the driver, which ignores it beside our TLS settings (so that
 * `ssl=require` silently became `prefer`, plaintext when the server offers no TLS).
 */
const SSL_PARAMETER_MODES: Readonly<Record<string, SslMode>> = {
  true: "require",
  require: "require",
  "verify-full": "verify-full",
  prefer: "prefer",
  false: "disable",
  disable: "disable",
};

/** Reads `sslmode` (or `ssl`) and `sslrootcert`; throws a one-line Error when they make no sense. */
export function tlsSettingsOf(url: URL): TlsSettings {
  const named = url.searchParams.get("sslmode");
  const spelled = sslParameterMode(url);
  if (named !== null && spelled !== undefined && named !== spelled) {
    throw new Error(`sslmode=${named.slice(0, 40)} and ssl (${spelled}) disagree`);
  }
  const raw = named ?? spelled ?? DEFAULT_SSL_MODE;
  if (!(SSL_MODES as readonly string[]).includes(raw)) {
    throw new Error(
      `sslmode must be one of ${SSL_MODES.join(", ")}, got ${JSON.stringify(raw.slice(0, 40))}`,
    );
  }
  const given = url.searchParams.get("sslrootcert") ?? undefined;
  const rootCert = given === "" ? undefined : given;
  let mode = raw as SslMode;
  if (rootCert !== undefined) {
    if (mode === "disable" || mode === "prefer") {
      throw new Error(`sslrootcert needs sslmode=require, verify-ca or verify-full, not ${mode}`);
    }
    // As libpq: a root certificate given with `require` is used, which makes it `verify-ca`.
    if (mode === "require") mode = "verify-ca";
  } else if (mode === "verify-ca") {
    // A CA without a name check means nothing against Deno's public roots.
    throw new Error("sslmode=verify-ca needs sslrootcert=<file of the CA certificates>");
  }
  return { mode, rootCert };
}

/** The mode `ssl=…` names, if it is given; throws when it names none. */
function sslParameterMode(url: URL): SslMode | undefined {
  const raw = url.searchParams.get("ssl");
  if (raw === null) return undefined;
  const mode = Object.hasOwn(SSL_PARAMETER_MODES, raw) ? SSL_PARAMETER_MODES[raw] : undefined;
  if (mode === undefined) {
    throw new Error(
      `ssl must be one of ${Object.keys(SSL_PARAMETER_MODES).join(", ")}, got ${
        JSON.stringify(raw.slice(0, 40))
      }`,
    );
  }
  return mode;
}
