/**
 * Which client ids are the URL of a Client ID Metadata Document: what every grant and the
 * authorization endpoint ask before treating a client id as registered or as a document.
 *
 * @see draft-ietf-oauth-client-id-metadata-document §3
 */

/** Whether a client id is a metadata document URL: an `https` URL with a path. */
export function isClientMetadataUrl(clientId: string): boolean {
  if (!/^https:\/\//i.test(clientId)) return false;
  const url = URL.parse(clientId);
  return url !== null && url.pathname !== "/";
}
