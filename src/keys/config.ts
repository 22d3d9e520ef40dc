/**
 * The signing secrets and keys (JWT_SECRET, JWT_SECRET_PREVIOUS, ACCESS_TOKEN_ALG,
 * SIGNING_KEYS, SIGNING_KEYS_FILE) and the rules that tie them together, checked once at
 * start-up: start-up stops with one line when they disagree.
 */

import { MIN_SECRET_BYTES, oneOf, parseSecret } from "../config/parsers.ts";
import { secret } from "../config/secret_files.ts";
import { ConfigError, type ConfigTable, type ValuesOf, variable } from "../config/variable.ts";
import {
  algorithmOfKey,
  parseSigningKeys,
  parseSigningKeysFile,
  type PrivateSigningJwk,
} from "./signing_keys.ts";

export const KEYS_VARIABLES = {
  // The OAuth settings first: when several values are wrong, JWT_SECRET's error is reported.
  /** Absent: the service starts but every operation answers 500 (spec §1.7). */
  jwtSecret: secret(variable(
    "JWT_SECRET",
    undefined,
    parseSecret,
    `HS256 signing secret, at least ${MIN_SECRET_BYTES} bytes`,
  )),
  /** A retired signing secret whose tokens are still accepted while they live. */
  jwtSecretPrevious: secret(variable(
    "JWT_SECRET_PREVIOUS",
    undefined,
    parseSecret,
    "the secret before a rotation: its tokens and stored sessions stay valid",
  )),
  /** `HS256`: the spec; `ES256`/`EdDSA`: signed with SIGNING_KEYS, published at the JWKS. */
  accessTokenAlg: variable(
    "ACCESS_TOKEN_ALG",
    "HS256",
    oneOf("HS256", "ES256", "EdDSA"),
    "`ES256`/`EdDSA`: access tokens resource servers verify with `/.well-known/jwks.json`",
  ),
  /** Private JWKs, first signs, all published; undefined: none (or SIGNING_KEYS_FILE). */
  signingKeys: {
    ...variable(
      "SIGNING_KEYS",
      undefined,
      parseSigningKeys,
      "ES256/EdDSA: JSON array of private JWKs with `kid`s; the first signs, all verify",
    ),
    // Private keys: never shown; SIGNING_KEYS_FILE is its file form already.
    hidden: true,
  },
  /** A file holding what SIGNING_KEYS would; read once at start-up. */
  signingKeysFile: variable(
    "SIGNING_KEYS_FILE",
    undefined,
    parseSigningKeysFile,
    "a file holding `SIGNING_KEYS` (instead of it)",
  ),
} satisfies ConfigTable;

/** What KEYS_VARIABLES reads to. */
export type KeysConfig = ValuesOf<typeof KEYS_VARIABLES>;

/** The configured signing keys, first (signing) first; none under HS256. */
export function configuredSigningKeys(
  config: Pick<KeysConfig, "signingKeys" | "signingKeysFile">,
): PrivateSigningJwk[] {
  return config.signingKeys ?? config.signingKeysFile ?? [];
}

/**
 * ES256/EdDSA need exactly one source of keys, all of that algorithm; HS256 takes none (a key
 * set there would be silently unused).
 */
export function requireSigningKeys(config: KeysConfig): void {
  const algorithm = config.accessTokenAlg;
  const both = config.signingKeys !== undefined && config.signingKeysFile !== undefined;
  if (both) throw new ConfigError("SIGNING_KEYS", "and SIGNING_KEYS_FILE are both set; set one");
  const source = config.signingKeys !== undefined ? "SIGNING_KEYS" : "SIGNING_KEYS_FILE";
  const keys = configuredSigningKeys(config);
  if (algorithm === "HS256") {
    if (keys.length > 0) {
      throw new ConfigError(
        source,
        "is set but ACCESS_TOKEN_ALG is HS256: set ACCESS_TOKEN_ALG=ES256 or EdDSA to use it",
      );
    }
    return;
  }
  if (keys.length === 0) {
    throw new ConfigError(
      "SIGNING_KEYS",
      `is required with ACCESS_TOKEN_ALG=${algorithm} (or SIGNING_KEYS_FILE); ` +
        `generate one with: deno task admin keys generate --alg ${algorithm}`,
    );
  }
  for (const key of keys) {
    if (algorithmOfKey(key) !== algorithm) {
      throw new ConfigError(
        source,
        `key ${JSON.stringify(key.kid)} is an ${algorithmOfKey(key)} key but ` +
          `ACCESS_TOKEN_ALG is ${algorithm}`,
      );
    }
  }
}

/** The JWT secrets, current first: the first signs, all verify. */
export function jwtSecrets(
  jwtSecret: string,
  config: Pick<KeysConfig, "jwtSecretPrevious">,
): string[] {
  return [jwtSecret, ...(config.jwtSecretPrevious ? [config.jwtSecretPrevious] : [])];
}
