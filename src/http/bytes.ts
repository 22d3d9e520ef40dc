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

/**
 * A body read up to `max` bytes: its bytes when it holds no more, else a stream of all of it
 * that starts with what was read (so the caller may refuse it, cancelling it, or pass it on
 * without holding more). A failed read rejects as the body's read did.
 */
export async function readUpTo(
  body: ReadableStream<Uint8Array>,
  max: number,
): Promise<Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array>> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (let part = await reader.read(); !part.done; part = await reader.read()) {
    chunks.push(part.value);
    size += part.value.byteLength;
    if (size > max) return resumed(chunks, reader);
  }
  return joinChunks(chunks, size);
}

/** The chunks already read, then the rest of `reader`. */
function resumed(
  chunks: Uint8Array[],
  reader: ReadableStreamDefaultReader<Uint8Array>,
): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    start(controller) {
      for (const chunk of chunks.splice(0)) controller.enqueue(chunk);
    },
    async pull(controller) {
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
    cancel: (reason) => reader.cancel(reason),
  });
}
