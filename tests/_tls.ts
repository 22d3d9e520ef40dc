/**
 * Test-only TLS on loopback: a throw-away CA and a server certificate for `127.0.0.1` and
 * `localhost`, generated in memory at test time (no files, no openssl), and an https server for
 * Client ID Metadata Documents that a test scripts per request.
 */

import * as x509 from "@peculiar/x509";

/** PEM texts of a test CA and a server certificate it signed. */
export interface TestCertificates {
  caPem: string;
  certPem: string;
  keyPem: string;
}

const ALGORITHM = { name: "ECDSA", namedCurve: "P-256", hash: "SHA-256" } as const;
const DAY_MS = 86_400_000;

let generated: Promise<TestCertificates> | undefined;

/** One CA and server certificate per test process (generation takes a moment). */
export function testCertificates(): Promise<TestCertificates> {
  return generated ??= generateCertificates();
}

/** The names a server certificate is for. */
export interface CertificateNames {
  ips: string[];
  dns: string[];
}

const LOOPBACK_NAMES: CertificateNames = { ips: ["127.0.0.1"], dns: ["localhost"] };

/** A new CA and a server certificate it signed for `names` (`testCertificates`: loopback). */
export async function generateCertificates(
  names: CertificateNames = LOOPBACK_NAMES,
): Promise<TestCertificates> {
  x509.cryptoProvider.set(crypto);
  const notBefore = new Date(Date.now() - DAY_MS);
  const notAfter = new Date(Date.now() + DAY_MS);
  const caKeys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const ca = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: "01",
    name: "CN=Test CA (tests only)",
    notBefore,
    notAfter,
    keys: caKeys,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(true, undefined, true),
      new x509.KeyUsagesExtension(
        x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign,
        true,
      ),
      await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const serverKeys = await crypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: "02",
    subject: `CN=${names.ips[0] ?? names.dns[0]}`,
    issuer: ca.subject,
    notBefore,
    notAfter,
    signingKey: caKeys.privateKey,
    publicKey: serverKeys.publicKey,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.BasicConstraintsExtension(false, undefined, true),
      new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature, true),
      new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth]),
      new x509.SubjectAlternativeNameExtension([
        ...names.ips.map((value) => ({ type: "ip" as const, value })),
        ...names.dns.map((value) => ({ type: "dns" as const, value })),
      ]),
      await x509.AuthorityKeyIdentifierExtension.create(caKeys.publicKey),
    ],
  });
  const pkcs8 = new Uint8Array(await crypto.subtle.exportKey("pkcs8", serverKeys.privateKey));
  return {
    caPem: ca.toString("pem"),
    certPem: cert.toString("pem"),
    keyPem: pem("PRIVATE KEY", pkcs8),
  };
}

function pem(label: string, der: Uint8Array): string {
  const base64 = der.toBase64().match(/.{1,64}/g)!.join("\n");
  return `-----BEGIN ${label}-----\n${base64}\n-----END ${label}-----\n`;
}

/** An https server on loopback whose answers a test scripts; counts requests per path. */
export interface DocumentServer {
  /** e.g. `https://127.0.0.1:41234` */
  origin: string;
  /** The PEM of the CA that signed its certificate. */
  caPem: string;
  /** A file holding `caPem` (for `DENO_CERT`), written on first use, removed by `close`. */
  caFile(): Promise<string>;
  /** Requests received, by path. */
  hits: Map<string, number>;
  /** Accept headers received, in order. */
  accepts: (string | null)[];
  /** Sets what `path` answers from now on. */
  route(path: string, answer: (request: Request) => Response | Promise<Response>): void;
  close(): Promise<void>;
}

/** Starts an https server on 127.0.0.1 with a certificate from `testCertificates`. */
export async function startDocumentServer(): Promise<DocumentServer> {
  const { caPem, certPem, keyPem } = await testCertificates();
  const routes = new Map<string, (request: Request) => Response | Promise<Response>>();
  const hits = new Map<string, number>();
  const accepts: (string | null)[] = [];
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, cert: certPem, key: keyPem, onListen() {} },
    (request) => {
      const path = new URL(request.url).pathname;
      hits.set(path, (hits.get(path) ?? 0) + 1);
      accepts.push(request.headers.get("accept"));
      const answer = routes.get(path);
      return answer ? answer(request) : new Response("not found", { status: 404 });
    },
  );
  let caFile: Promise<string> | undefined;
  return {
    origin: `https://127.0.0.1:${server.addr.port}`,
    caPem,
    caFile: () =>
      caFile ??= Deno.makeTempFile({ suffix: ".pem" }).then(async (path) => {
        await Deno.writeTextFile(path, caPem);
        return path;
      }),
    hits,
    accepts,
    route: (path, answer) => void routes.set(path, answer),
    async close() {
      await server.shutdown();
      if (caFile) await Deno.remove(await caFile);
    },
  };
}
