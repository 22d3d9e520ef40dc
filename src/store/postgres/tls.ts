/**
 * TLS to PostgreSQL as the URL's `sslmode` and `sslrootcert` ask, with libpq's meanings. The
 * driver (npm `postgres`) alone would treat an unknown `sslmode` like `verify-full`, verify only
 * against Deno's default roots, check an IP host against "localhost", and send `sslrootcert` to
 * the server as a setting (which refuses it): so both parameters are read here, taken out of
 * the URL, and the driver is given the TLS options they mean.
 */

import { checkServerIdentity, type PeerCertificate } from "node:tls";
import type { TlsSettings } from "./tls_settings.ts";
import { readConfigurationFile, RefusedFile } from "../../config/bounded_read.ts";

/** The TLS options the driver takes (`ssl`): off, unverified, or node:tls options. */
export type DriverSsl = false | "prefer" | "require" | {
  ca?: string;
  rejectUnauthorized: true;
  checkServerIdentity: (host: string, cert: PeerCertificate) => Error | undefined;
};

/** `url` without the parameters read here (the driver would pass them on to the server). */
export function withoutTlsParameters(url: URL): string {
  const stripped = new URL(url);
  stripped.searchParams.delete("sslmode");
  stripped.searchParams.delete("sslrootcert");
  stripped.searchParams.delete("ssl");
  return stripped.href;
}

/** The driver's `ssl` for `settings`; reads the root certificate file (throws when it cannot). */
export function driverSsl(settings: TlsSettings, hostname: string): DriverSsl {
  switch (settings.mode) {
    case "disable":
      return false;
    case "prefer":
    case "require":
      return settings.mode;
    case "verify-ca":
    case "verify-full": {
      const ca = settings.rootCert === undefined || settings.rootCert === "system"
        ? undefined
        : readRootCert(settings.rootCert);
      const checkName = settings.mode === "verify-full";
      return {
        ...(ca === undefined ? {} : { ca }),
        rejectUnauthorized: true,
        // The URL's host, not the driver's guess ("localhost" when it is an IP address).
        checkServerIdentity: (_host, cert) =>
          checkName ? checkServerIdentity(unbracketed(hostname), cert) : undefined,
      };
    }
  }
}

function readRootCert(path: string): string {
  let text: string;
  try {
    text = readConfigurationFile(path);
  } catch (error) {
    const code = error instanceof RefusedFile
      ? error.message
      : (error as { code?: string }).code ?? "unreadable";
    throw new Error(`sslrootcert ${path} cannot be read (${code})`);
  }
  if (!text.includes("-----BEGIN CERTIFICATE-----")) {
    throw new Error(`sslrootcert ${path} holds no PEM certificate`);
  }
  return text;
}

function unbracketed(hostname: string): string {
  return hostname.startsWith("[") ? hostname.slice(1, -1) : hostname;
}
