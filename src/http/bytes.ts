/** Byte helpers shared by the body readers. */

/** `chunks` (of `size` bytes in all) as one array. */
export function joinChunks(chunks: readonly Uint8Array[], size: number): Uint8Array<ArrayBuffer> {
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.byteLength;
  }
  return bytes;
}

/**
 * Decodes whole UTF-8 bodies (malformed bytes become U+FFFD). Without `stream` a decoder keeps
 * no state between calls, so one serves every request.
 */
export const UTF8: TextDecoder = new TextDecoder();
