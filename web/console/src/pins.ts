// Host key pins (spec 24, 5.5) in IndexedDB `bothy.terminal.pins` of the
// origin: per host ID the noise_public_key, key_generation and fingerprint of
// the first successful open. Logout deletes the database (5.1: in a browser
// the pins do not protect against the server itself, which serves the page).

export const PINS_DB = "bothy.terminal.pins";
const STORE = "pins";

export interface Pin {
  host_id: string;
  noise_public_key: string;
  key_generation: number;
  key_fingerprint: string;
}

export type PinCheck = { kind: "new" } | { kind: "same" } | { kind: "changed"; old: Pin };

function open(): Promise<IDBDatabase> {
  return new Promise((resolve, reject) => {
    const request = indexedDB.open(PINS_DB, 1);
    request.onupgradeneeded = () => {
      request.result.createObjectStore(STORE, { keyPath: "host_id" });
    };
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => reject(request.error ?? new Error("IndexedDB refused"));
  });
}

async function run<T>(mode: IDBTransactionMode, action: (store: IDBObjectStore) => IDBRequest<T>): Promise<T> {
  const db = await open();
  try {
    return await new Promise<T>((resolve, reject) => {
      const tx = db.transaction(STORE, mode);
      const request = action(tx.objectStore(STORE));
      tx.oncomplete = () => resolve(request.result);
      tx.onerror = () => reject(tx.error ?? new Error("IndexedDB transaction failed"));
      tx.onabort = () => reject(tx.error ?? new Error("IndexedDB transaction aborted"));
    });
  } finally {
    db.close();
  }
}

export async function loadPin(hostId: string): Promise<Pin | undefined> {
  return (await run("readonly", (store) => store.get(hostId))) as Pin | undefined;
}

export async function storePin(pin: Pin): Promise<void> {
  await run("readwrite", (store) => store.put(pin));
}

export function comparePin(stored: Pin | undefined, offered: Pin): PinCheck {
  if (stored === undefined) return { kind: "new" };
  if (stored.noise_public_key === offered.noise_public_key && stored.key_generation === offered.key_generation) {
    return { kind: "same" };
  }
  return { kind: "changed", old: stored };
}

export async function checkPin(offered: Pin): Promise<PinCheck> {
  return comparePin(await loadPin(offered.host_id), offered);
}

/** Deletes the whole pins database (logout). */
export function deletePins(): Promise<void> {
  return new Promise((resolve) => {
    const request = indexedDB.deleteDatabase(PINS_DB);
    request.onsuccess = () => resolve();
    request.onerror = () => resolve();
    request.onblocked = () => resolve();
  });
}
