/** The access-token signer ACCESS_TOKEN_ALG asks for. */

import { createTokenSigner, type TokenSigner } from "../jwt.ts";
import { createAsymmetricTokenSigner } from "./asymmetric_signer.ts";
import { configuredSigningKeys, type KeysConfig } from "./config.ts";

/** HS256 over the JWT secrets (the spec), or ES256/EdDSA over the configured keys. */
export function createConfiguredTokenSigner(
  config: Pick<KeysConfig, "accessTokenAlg" | "signingKeys" | "signingKeysFile">,
  jwtSecrets: readonly string[],
): TokenSigner {
  const algorithm = config.accessTokenAlg;
  return algorithm === "HS256"
    ? createTokenSigner(jwtSecrets)
    : createAsymmetricTokenSigner(configuredSigningKeys(config), algorithm);
}
