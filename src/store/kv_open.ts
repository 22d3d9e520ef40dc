/**
 * Opening the KV that KV_PATH names, for the service and for the operator's CLI. A KV that
 * cannot be opened is a configuration error naming KV_PATH and saying why (most often: its
 * folder does not exist), never a stack trace.
 */

import { dirname, resolve } from "node:path";
import { ConfigError } from "../config/variable.ts";

/**
 * What KV_PATH names: Deno's default location (unset), a store of this process alone
 * (`:memory:`), a KV Connect server (http or https URL), or a file.
 */
export type KvLocation = "default" | "memory" | "remote" | "file";

export function kvLocation(path: string | undefined): KvLocation {
  if (path === undefined) return "default";
  if (path === ":memory:") return "memory";
  if (/^https?:\/\//i.test(path)) return "remote";
  return "file";
}

/**
 * Opens the KV at `path` (Deno's default when undefined); a file is created if its folder
 * exists. Throws ConfigError naming KV_PATH when it cannot be opened.
 */
export async function openKv(
  path: string | undefined,
  open: (path: string | undefined) => Promise<Deno.Kv> = Deno.openKv,
  wait: (ms: number) => Promise<void> = (ms) => new Promise((done) => setTimeout(done, ms)),
): Promise<Deno.Kv> {
  for (let attempt = 1;; attempt++) {
    try {
      return await open(path);
    } catch (error) {
      // Workers of `deno serve --parallel` (or processes) opening one new file at once: SQLite
      // answers "database is locked" to all but one while it sets the file up. Try again.
      if (attempt < LOCKED_OPEN_ATTEMPTS && isLocked(error)) {
        await wait(LOCKED_OPEN_WAIT_MS * attempt);
        continue;
      }
      const where = path ?? "Deno's default KV";
      throw new ConfigError("KV_PATH", `cannot open ${where}: ${await whyNotOpened(path, error)}`);
    }
  }
}

/**
 * For the KV file at `path`, just opened: whether the file at `path` is, later, no longer that
 * one (deleted, or another moved there). SQLite goes on with the file it holds open and never
 * says so. False when this cannot tell (no inode numbers, a stat refused).
 */
export async function fileReplacedCheck(path: string): Promise<() => Promise<boolean>> {
  const opened = await Deno.stat(path);
  return async () => {
    try {
      const now = await Deno.stat(path);
      return now.dev !== opened.dev || now.ino !== opened.ino;
    } catch (error) {
      return error instanceof Deno.errors.NotFound;
    }
  };
}

/** Opening a file another process is setting up is tried this often, waiting longer each time. */
const LOCKED_OPEN_ATTEMPTS = 10;
const LOCKED_OPEN_WAIT_MS = 50;

function isLocked(error: unknown): boolean {
  return error instanceof Error && /database is locked/i.test(error.message);
}

/**
 * For the operator's CLI, which must work on the service's store and never on a new, empty
 * one: why `path` names no existing store, or undefined when it may (a KV Connect URL cannot be
 * checked from here: the server answers for it).
 */
export async function existingStoreProblem(path: string | undefined): Promise<string | undefined> {
  switch (kvLocation(path)) {
    case "default":
      return "KV_PATH is not set: set it to the service's KV (its file, or its KV Connect URL); " +
        "without it Deno's default KV would be opened, which is not the service's";
    case "memory":
      return "KV_PATH=:memory: is a store of this process alone: set the service's KV file " +
        "or KV Connect URL";
    case "remote":
      return undefined;
    case "file":
      return await missingFileProblem(path ?? "");
  }
}

async function missingFileProblem(path: string): Promise<string | undefined> {
  let info: Deno.FileInfo;
  try {
    info = await Deno.stat(path);
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) return `cannot open KV ${path}: ${error}`;
    const folder = await missingFolder(path);
    return `cannot open KV ${path}: ` +
      (folder
        ? `the folder ${folder} does not exist`
        : "no such file; KV_PATH must name the KV file of the running service");
  }
  if (!info.isFile) return `cannot open KV ${path}: not a file`;
  return await notKvProblem(path);
}

/**
 * Why the file at `path` holds no Deno KV store (it is empty, or another program's SQLite
 * database), or undefined when it does or this cannot tell (locked, unreadable: opening it says
 * why). Deno.openKv would make it one, writing KV's tables into whatever the path names.
 */
async function notKvProblem(path: string): Promise<string | undefined> {
  // Loaded only here: the service never needs it.
  const { DatabaseSync } = await import("node:sqlite");
  let db;
  try {
    db = new DatabaseSync(path, { readOnly: true });
    const kvTable = db.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'kv'");
    if (kvTable.get() !== undefined) return undefined;
  } catch (error) {
    if (!/not a database/i.test(error instanceof Error ? error.message : String(error))) {
      return undefined;
    }
  } finally {
    db?.close();
  }
  return `cannot open KV ${path}: it holds no Deno KV store (empty, or another program's ` +
    "database); KV_PATH must name the KV file of the running service";
}

async function whyNotOpened(path: string | undefined, error: unknown): Promise<string> {
  if (kvLocation(path) === "file") {
    const folder = await missingFolder(path ?? "");
    if (folder) {
      return `the folder ${folder} does not exist; create it, writable by the service ` +
        `(e.g. install -d -m 0700 ${folder}), or set KV_PATH elsewhere`;
    }
  }
  return error instanceof Error ? error.message : String(error);
}

/** The folder a KV file would live in, when that folder does not exist. */
async function missingFolder(path: string): Promise<string | undefined> {
  const folder = dirname(resolve(path));
  try {
    await Deno.stat(folder);
    return undefined;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return folder;
    return undefined;
  }
}
