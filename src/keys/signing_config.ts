/**
 * The rules that tie ACCESS_TOKEN_ALG to SIGNING_KEYS / SIGNING_KEYS_FILE, checked once by
 * loadConfig: start-up stops with one line when they disagree.
 */

import type { Config } from "../config/mod.ts";
import { ConfigError } from "../config/variable.ts";
import { algorithmOfKey, type PrivateSigningJwk } from "./signing_keys.ts";

/** The configured signing keys, first (signing) first; none under HS256. */
export function configuredSigningKeys(config: Config): PrivateSigningJwk[] {
  return config.signingKeys ?? config.signingKeysFile ?? [];
}

/**
 * ES256/EdDSA need exactly one source of keys, all of that algorithm; HS256 takes none (a key
 * set there would be silently unused).
 */
export function requireSigningKeys(config: Config): void {
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
