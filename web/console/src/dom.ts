// DOM helpers: every text goes in through textContent, never as HTML.

type Child = Node | string | null | undefined | false;
type Attrs = Record<string, string | boolean | ((event: Event) => void) | undefined>;

export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Child[]): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === false) {
      continue;
    }
    if (typeof value === "function") {
      element.addEventListener(name.replace(/^on/, ""), value);
    } else if (value === true) {
      element.setAttribute(name, "");
    } else {
      element.setAttribute(name, value);
    }
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    element.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return element;
}

/** A line of progress ("Waiting for your passkey…"), one per wait. */
export function progress(text: string): HTMLElement {
  return h("p", { class: "progress", role: "status", "data-progress": "" }, text);
}

/** The fingerprint of 4.3 in groups of four characters. */
export function groupsOfFour(fingerprint: string): string {
  const plain = fingerprint.replace(/[^0-9A-Za-z]/g, "");
  return (plain.match(/.{1,4}/g) ?? []).join(" ");
}
