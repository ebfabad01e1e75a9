// Builds a test-only example of the workspace with the feature set of
// scripts/test (a no-op after its cargo test) and returns its path.
import { execFileSync } from "node:child_process";
import { fileURLToPath } from "node:url";

export const REPO = fileURLToPath(new URL("../../../", import.meta.url));

export function cargoExample(name: string): string {
  const out = execFileSync(
    "cargo",
    ["build", "--locked", "--workspace", "--features", "bothy-host/test-seams,bothy/test-seams", "--example", name, "--message-format=json"],
    { cwd: REPO, encoding: "utf8", stdio: ["ignore", "pipe", "inherit"], maxBuffer: 64 << 20 },
  );
  for (const line of out.split("\n")) {
    if (!line.includes('"executable"')) continue;
    const message = JSON.parse(line) as { executable?: string | null; target?: { name?: string } };
    if (message.target?.name === name && typeof message.executable === "string") {
      return message.executable;
    }
  }
  throw new Error(`cargo built no example ${name}`);
}
