// The console's pages. Everything is built with DOM calls and textContent:
// no HTML from the server or from terminal output reaches innerHTML.

export function start(root: HTMLElement | null): void {
  if (root === null) {
    return;
  }
  const title = document.createElement("h1");
  title.textContent = "bothy console";
  root.replaceChildren(title);
}
