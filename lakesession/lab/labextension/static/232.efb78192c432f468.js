"use strict";(self.rspackChunklakesession=self.rspackChunklakesession||[]).push([[232],{475(e,t,r){var o=r(601),n=r.n(o),a=r(314),s=(r.n(a))()(n());s.push([e.id,`.lakesession-statusbar-item {
  cursor: pointer;
  padding: 0 5px;
  font-size: var(--jp-ui-font-size1);
  line-height: 24px;
  white-space: nowrap;
}

.lakesession-statusbar-label {
  font-weight: 600;
}

.lakesession-panel {
  padding: 8px 12px;
  overflow: auto;
  font-size: var(--jp-ui-font-size1);
  color: var(--jp-ui-font-color1);
  background: var(--jp-layout-color1);
  min-width: 300px;
}

.lakesession-panel-title {
  font-size: var(--jp-ui-font-size2);
  margin: 0 0 8px;
}

.lakesession-session {
  border-top: 1px solid var(--jp-border-color2);
  padding: 6px 0;
}

.lakesession-kernel {
  font-weight: 600;
  margin-bottom: 4px;
}

.lakesession-identity {
  display: grid;
  grid-template-columns: max-content auto;
  gap: 2px 10px;
  margin: 0 0 6px;
}

.lakesession-identity dt {
  color: var(--jp-ui-font-color2);
}

.lakesession-identity dd {
  margin: 0;
  word-break: break-all;
}

.lakesession-credentials {
  border-collapse: collapse;
  width: 100%;
}

.lakesession-credentials th,
.lakesession-credentials td {
  text-align: left;
  padding: 2px 6px 2px 0;
  border-bottom: 1px solid var(--jp-border-color3);
}

.lakesession-credentials th {
  color: var(--jp-ui-font-color2);
  font-weight: normal;
}

.lakesession-table {
  word-break: break-all;
}

.lakesession-ttl {
  white-space: nowrap;
  font-variant-numeric: tabular-nums;
}

.lakesession-state-valid {
  color: var(--jp-success-color1);
}

.lakesession-state-refreshing {
  color: var(--jp-warn-color1);
}

.lakesession-state-revoked,
.lakesession-state-failed,
.lakesession-state-expired,
.lakesession-ttl-low {
  color: var(--jp-error-color1);
}

.lakesession-error {
  color: var(--jp-error-color1);
  margin-bottom: 6px;
}

.lakesession-empty {
  color: var(--jp-ui-font-color2);
}
`,""]),r.d(t,{},{A:s})},314(e){e.exports=function(e){var t=[];return t.toString=function(){return this.map(function(t){var r="",o=void 0!==t[5];return t[4]&&(r+="@supports (".concat(t[4],") {")),t[2]&&(r+="@media ".concat(t[2]," {")),o&&(r+="@layer".concat(t[5].length>0?" ".concat(t[5]):""," {")),r+=e(t),o&&(r+="}"),t[2]&&(r+="}"),t[4]&&(r+="}"),r}).join("")},t.i=function(e,r,o,n,a){"string"==typeof e&&(e=[[null,e,void 0]]);var s={};if(o)for(var i=0;i<this.length;i++){var l=this[i][0];null!=l&&(s[l]=!0)}for(var c=0;c<e.length;c++){var p=[].concat(e[c]);o&&s[p[0]]||(void 0!==a&&(void 0===p[5]||(p[1]="@layer".concat(p[5].length>0?" ".concat(p[5]):""," {").concat(p[1],"}")),p[5]=a),r&&(p[2]&&(p[1]="@media ".concat(p[2]," {").concat(p[1],"}")),p[2]=r),n&&(p[4]?(p[1]="@supports (".concat(p[4],") {").concat(p[1],"}"),p[4]=n):p[4]="".concat(n)),t.push(p))}},t}},601(e){e.exports=function(e){return e[1]}},72(e){var t=[];function r(e){for(var r=-1,o=0;o<t.length;o++)if(t[o].identifier===e){r=o;break}return r}function o(e,o){for(var n={},a=[],s=0;s<e.length;s++){var i=e[s],l=o.base?i[0]+o.base:i[0],c=n[l]||0,p="".concat(l," ").concat(c);n[l]=c+1;var u=r(p),d={css:i[1],media:i[2],sourceMap:i[3],supports:i[4],layer:i[5]};if(-1!==u)t[u].references++,t[u].updater(d);else{var f=function(e,t){var r=t.domAPI(t);return r.update(e),function(t){t?(t.css!==e.css||t.media!==e.media||t.sourceMap!==e.sourceMap||t.supports!==e.supports||t.layer!==e.layer)&&r.update(e=t):r.remove()}}(d,o);o.byIndex=s,t.splice(s,0,{identifier:p,updater:f,references:1})}a.push(p)}return a}e.exports=function(e,n){var a=o(e=e||[],n=n||{});return function(e){e=e||[];for(var s=0;s<a.length;s++){var i=r(a[s]);t[i].references--}for(var l=o(e,n),c=0;c<a.length;c++){var p=r(a[c]);0===t[p].references&&(t[p].updater(),t.splice(p,1))}a=l}}},659(e){var t={};e.exports=function(e,r){var o=function(e){if(void 0===t[e]){var r=document.querySelector(e);if(window.HTMLIFrameElement&&r instanceof window.HTMLIFrameElement)try{r=r.contentDocument.head}catch(e){r=null}t[e]=r}return t[e]}(e);if(!o)throw Error("Couldn't find a style target. This probably means that the value for the 'insert' parameter is invalid.");o.appendChild(r)}},540(e){e.exports=function(e){var t=document.createElement("style");return e.setAttributes(t,e.attributes),e.insert(t,e.options),t}},56(e,t,r){e.exports=function(e){var t=r.nc;t&&e.setAttribute("nonce",t)}},825(e){e.exports=function(e){if("u"<typeof document)return{update:function(){},remove:function(){}};var t=e.insertStyleElement(e);return{update:function(r){var o,n,a;o="",r.supports&&(o+="@supports (".concat(r.supports,") {")),r.media&&(o+="@media ".concat(r.media," {")),(n=void 0!==r.layer)&&(o+="@layer".concat(r.layer.length>0?" ".concat(r.layer):""," {")),o+=r.css,n&&(o+="}"),r.media&&(o+="}"),r.supports&&(o+="}"),(a=r.sourceMap)&&"u">typeof btoa&&(o+="\n/*# sourceMappingURL=data:application/json;base64,".concat(btoa(unescape(encodeURIComponent(JSON.stringify(a))))," */")),e.styleTagTransform(o,t,e.options)},remove:function(){var e;null===(e=t).parentNode||e.parentNode.removeChild(e)}}}},113(e){e.exports=function(e,t){if(t.styleSheet)t.styleSheet.cssText=e;else{for(;t.firstChild;)t.removeChild(t.firstChild);t.appendChild(document.createTextNode(e))}}},579(e,t,r){var o=r(72),n=r.n(o),a=r(825),s=r.n(a),i=r(659),l=r.n(i),c=r(56),p=r.n(c),u=r(540),d=r.n(u),f=r(113),v=r.n(f),m=r(475),h={};h.styleTagTransform=v(),h.setAttributes=p(),h.insert=l().bind(null,"head"),h.domAPI=s(),h.insertStyleElement=d(),n()(m.A,h),m.A&&m.A.locals&&m.A.locals}}]);