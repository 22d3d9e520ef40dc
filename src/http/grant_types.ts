/**
 * `grant_type` values of the OAuth protocol that several parts of the service name: the token
 * endpoint serves them, registration checks them, the upstream client sends one to GitLab.
 */

/** The device code grant (RFC 8628 §3.4). */
export const DEVICE_CODE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code";
