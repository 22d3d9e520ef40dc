/** The access-token signer ACCESS_TOKEN_ALG asks for. */

import type { Config } from "../config/mod.ts";
import { createTokenSigner, type TokenSigner } from "../jwt.ts";
import { createAsymmetricTokenSigner } from "./asymmetric_signer.ts";
import { configuredSigningKeys } from "./signing_config.ts";

/** HS256 over the JWT secrets (the spec), or ES256/EdDSA over the configured keys. */
export function createConfiguredTokenSigner(
  config: Config,
  jwtSecrets: readonly string[],
): TokenSigner {
  const algorithm = config.accessTokenAlg;
  return algorithm === "HS256"
    ? createTokenSigner(jwtSecrets)
    : createAsymmetricTokenSigner(configuredSigningKeys(config), algorithm);
}
