/**
 * Reading a file the operator names (a secret's `<NAME>_FILE`, SIGNING_KEYS_FILE, the
 * configuration files and the policy and token files they name): only a regular file, and no
 * more than a bound for its kind. A path to /dev/zero, /dev/urandom, a FIFO or a huge file hung
 * start-up (a FIFO blocks until someone writes) or read without end.
 *
 * @see docs/configuration.md "Configuration"
 */

const KIB = 1024;

/** The most each kind of file may hold (docs/configuration.md says them). */
export const READ_LIMITS = {
  /** A secret's `_FILE`, SIGNING_KEYS_FILE, a rule's `gitlab_token_file`. */
  secret: 64 * KIB,
  /** MCP_SERVERS_FILE, MCP_POLICY_FILE (and a server's `policy_file`), MACHINE_ACCESS_FILE. */
  configuration: 4 * KIB * KIB,
} as const;

/** A file refused before it is read, for what it is; its message is the reason. */
export class RefusedFile extends Error {
  override name = "RefusedFile";
}

/** As Deno.readTextFileSync decodes: a byte-order mark is kept, a bad byte becomes U+FFFD. */
const decoder = new TextDecoder("utf-8", { ignoreBOM: true });

/**
 * The text of the regular file at `path`, at most `limit` bytes. Throws RefusedFile for anything
 * else (a device, a FIFO, a folder; checked before opening, which a FIFO would block), and what
 * Deno throws when it cannot be read.
 */
export function readBoundedTextSync(path: string, limit: number): string {
  const info = Deno.statSync(path);
  requireSmallRegularFile(info, limit);
  const file = Deno.openSync(path);
  try {
    let buffer = new Uint8Array(firstBufferSize(info, limit));
    let filled = 0;
    while (filled < buffer.length) {
      const read = file.readSync(buffer.subarray(filled));
      if (read === null) break;
      filled += read;
      if (filled === buffer.length) buffer = grown(buffer, limit);
    }
    return decoder.decode(withinLimit(buffer, filled, limit));
  } finally {
    file.close();
  }
}

/** readBoundedTextSync without blocking the event loop (the reloads' reads). */
export async function readBoundedText(path: string, limit: number): Promise<string> {
  const info = await Deno.stat(path);
  requireSmallRegularFile(info, limit);
  const file = await Deno.open(path);
  try {
    let buffer = new Uint8Array(firstBufferSize(info, limit));
    let filled = 0;
    while (filled < buffer.length) {
      const read = await file.read(buffer.subarray(filled));
      if (read === null) break;
      filled += read;
      if (filled === buffer.length) buffer = grown(buffer, limit);
    }
    return decoder.decode(withinLimit(buffer, filled, limit));
  } finally {
    file.close();
  }
}

/**
 * Refuses `text`, read whole under a larger bound (a followed file's, config/file_watch.ts), as
 * reading it at `limit` would have (a token file a configuration file names, say).
 */
export function requireTextWithin(text: string, limit: number): void {
  if (new TextEncoder().encode(text).length > limit) throw tooLarge(limit);
}

function requireSmallRegularFile(info: Deno.FileInfo, limit: number): void {
  if (!info.isFile) throw new RefusedFile("not a regular file");
  if (info.size > limit) throw tooLarge(limit);
}

/**
 * The file's size as its stat saw it and one byte more, to find its end in one buffer: a buffer
 * of the bound at every read (a followed file's 4 MiB, every few seconds) was memory held for
 * nothing until the next garbage collection.
 */
function firstBufferSize(info: Deno.FileInfo, limit: number): number {
  return Math.min(info.size, limit) + 1;
}

/** `buffer` filled by a file that grew since its stat: room up to one byte past the bound. */
function grown(buffer: Uint8Array<ArrayBuffer>, limit: number): Uint8Array<ArrayBuffer> {
  if (buffer.length > limit) return buffer;
  const larger = new Uint8Array(Math.min(buffer.length * 2, limit + 1));
  larger.set(buffer);
  return larger;
}

/** The bytes read, unless more than `limit` were there (a file that grew since its stat). */
function withinLimit(buffer: Uint8Array, filled: number, limit: number): Uint8Array {
  if (filled > limit) throw tooLarge(limit);
  return buffer.subarray(0, filled);
}

function tooLarge(limit: number): RefusedFile {
  const size = limit >= KIB * KIB ? `${limit / KIB / KIB} MiB` : `${limit / KIB} KiB`;
  return new RefusedFile(`larger than ${size}`);
}

/** A secret's file (readBoundedTextSync at READ_LIMITS.secret). */
export function readSecretFile(path: string): string {
  return readBoundedTextSync(path, READ_LIMITS.secret);
}

/** A configuration file, or one it names (readBoundedTextSync; READ_LIMITS.configuration). */
export function readConfigurationFile(
  path: string,
  limit: number = READ_LIMITS.configuration,
): string {
  return readBoundedTextSync(path, limit);
}

/** A followed configuration file read again (readBoundedText; READ_LIMITS.configuration). */
export function readConfigurationFileAsync(path: string): Promise<string> {
  return readBoundedText(path, READ_LIMITS.configuration);
}
