"use strict";(()=>{function n(t){if(t===null)return;let e=document.createElement("h1");e.textContent="bothy console",t.replaceChildren(e)}n(document.getElementById("app"));})();
